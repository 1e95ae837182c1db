// RoPE, rotate_half convention. One thread per (row, head, pair j < D/2): it
// reads both elements of its pair before writing either, so out may alias x.
// The angle t * theta^(-2j/D) is formed and reduced in double (as on the CPU):
// in fp32, t ~ 4096 would leave only ~1e-3 rad of angle precision.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace weft::cuda {
namespace {

template <typename T>
__global__ void rope_kernel(T* out, const T* x, int64_t B, int64_t Tn, int64_t H, int64_t D,
                            double theta, float sign) {
  const int64_t half = D / 2;
  const int64_t total = B * Tn * H * half;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = i % half;
    const int64_t bth = i / half;  // (b * T + t) * H + h
    const int64_t t = (bth / H) % Tn;
    const double inv_freq = pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(D));
    double sn, cs;
    sincos(static_cast<double>(t) * inv_freq, &sn, &cs);
    const float c = static_cast<float>(cs), s = sign * static_cast<float>(sn);
    const int64_t off = bth * D;
    const float lo = load_f32(x, off + j), hi = load_f32(x, off + j + half);
    store_f32(out, off + j, lo * c - hi * s);
    store_f32(out, off + j + half, hi * c + lo * s);
  }
}

void rope(const char* op, Tensor out, const Tensor& x, float theta, float sign) {
  expect_float_dtype(op, "input", x);
  expect_same_dtype(op, "output", out, x, "input");
  const int64_t B = x.dim(0), Tn = x.dim(1), H = x.dim(2), D = x.dim(3);
  const int64_t total = B * Tn * H * (D / 2);
  if (total == 0) return;
  dispatch_float(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<blocks_for(total, 256), 256, 0, CudaContext::current().compute_stream()>>>(
        static_cast<T*>(out.data), static_cast<const T*>(x.data), B, Tn, H, D,
        static_cast<double>(theta), sign);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(Tensor out, const Tensor& x, float theta) {
  rope("rope_forward", out, x, theta, 1.0f);
}

void rope_backward(Tensor dx, const Tensor& dout, float theta) {
  rope("rope_backward", dx, dout, theta, -1.0f);
}

}  // namespace weft::cuda
