// AdamW on f32 master weights. The bias corrections are computed on the host
// in double (as the CPU kernel does) and passed as f32 factors, so the per-
// element math is the CPU kernel's expression in the same order.
#include <cmath>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace weft::cuda {
namespace {

struct AdamWFactors {
  float lr, b1, b2, one_b1, one_b2, eps, wd, inv_bc1, inv_bc2, grad_scale;
};

AdamWFactors factors(const ops::AdamWParams& h) {
  WEFT_CHECK(h.step >= 1,
             "adamw_update: step must be >= 1 (bias correction), got " + std::to_string(h.step));
  const double t = static_cast<double>(h.step);
  AdamWFactors f;
  f.lr = h.lr;
  f.b1 = h.beta1;
  f.b2 = h.beta2;
  f.one_b1 = static_cast<float>(1.0 - static_cast<double>(h.beta1));
  f.one_b2 = static_cast<float>(1.0 - static_cast<double>(h.beta2));
  f.eps = h.eps;
  f.wd = h.weight_decay;
  f.grad_scale = h.grad_scale;
  f.inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(h.beta1), t)));
  f.inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(h.beta2), t)));
  return f;
}

// working == nullptr: f32-only update.
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, bf16* working,
                             int64_t n, AdamWFactors f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = grad[i] * f.grad_scale;
    const float mi = f.b1 * m[i] + f.one_b1 * g;
    const float vi = f.b2 * v[i] + f.one_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float p = param[i];
    const float np = p - f.lr * (mi * f.inv_bc1 / (sqrtf(vi * f.inv_bc2) + f.eps) + f.wd * p);
    param[i] = np;
    if (working) working[i] = __float2bfloat16_rn(np);
  }
}

void check_state(const char* op, const Tensor& param, const Tensor& grad, const Tensor& m,
                 const Tensor& v) {
  expect_cuda_dtype(op, "param (master)", param, DType::F32);
  expect_cuda_dtype(op, "grad", grad, DType::F32);
  expect_cuda_dtype(op, "m", m, DType::F32);
  expect_cuda_dtype(op, "v", v, DType::F32);
}

void launch(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
            bf16* working, const ops::AdamWParams& h) {
  const AdamWFactors f = factors(h);
  const int64_t n = param.numel();
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n, 256), 256, 0, CudaContext::current().compute_stream()>>>(
      static_cast<float*>(param.data), static_cast<const float*>(grad.data),
      static_cast<float*>(m.data), static_cast<float*>(v.data), working, n, f);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void adamw_update(Tensor param, const Tensor& grad, Tensor m, Tensor v, const ops::AdamWParams& h) {
  check_state("adamw_update", param, grad, m, v);
  launch(param, grad, m, v, nullptr, h);
}

void adamw_update_master(Tensor master, const Tensor& grad, Tensor m, Tensor v, Tensor working,
                         const ops::AdamWParams& h) {
  const char* op = "adamw_update_master";
  check_state(op, master, grad, m, v);
  expect_cuda_dtype(op, "working", working, DType::BF16);
  const std::string why = "master is " + master.shape.str();
  for (const Tensor* t : {&grad, static_cast<const Tensor*>(&m), static_cast<const Tensor*>(&v),
                          static_cast<const Tensor*>(&working)}) {
    WEFT_CHECK(t->numel() == master.numel(),
               std::string(op) + ": operand of shape " + t->shape.str() + " differs from " + why);
    WEFT_CHECK(t->device == Device::CUDA, std::string(op) + ": every operand must be on CUDA");
  }
  WEFT_CHECK(master.device == Device::CUDA, std::string(op) + ": master must be on CUDA");
  launch(master, grad, m, v, static_cast<bf16*>(working.data), h);
}

}  // namespace weft::cuda
