// Cross-entropy over the LM head's logits, fp32 math whatever the logits'
// dtype. One block per row: a max pass and a sum-of-exp pass (block
// reductions), then the loss (forward) or the in-place gradient (backward).
// Backward reads every element of the row in its two reduction passes before
// the write pass, and in the write pass each thread reads element j just
// before writing it, so dlogits may alias logits: the memory saving of fusing
// the softmax into the loss is that no second [N, V] buffer ever exists.
// Bad targets set kTargetOutOfRange (no abort inside a kernel); the forward
// synchronises and reports them.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace weft::cuda {
namespace {

constexpr int kThreads = 512;

// Row max and sum(exp(l - max)); uses `red` (32 floats) via block reductions.
template <typename T>
__device__ void row_stats(const T* l, int64_t V, float* red, float* mx, float* sum) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, load_f32(l, j));
  m = block_max(m, red);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += expf(load_f32(l, j) - m);
  s = block_sum(s, red);
  *mx = m;
  *sum = s;
}

template <typename T>
__global__ void ce_fwd_kernel(float* losses, const T* logits, const int32_t* targets, int64_t V,
                              uint32_t* error_word) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const T* l = logits + row * V;
  float mx, s;
  row_stats(l, V, red, &mx, &s);
  if (threadIdx.x == 0) {
    const int32_t t = targets[row];
    if (t < 0 || t >= V) {
      atomicOr(error_word, kTargetOutOfRange);
      losses[row] = NAN;
    } else {
      losses[row] = mx + logf(s) - load_f32(l, t);
    }
  }
}

template <typename T>
__global__ void ce_bwd_kernel(T* dlogits, const T* logits, const int32_t* targets, int64_t V,
                              float scale, uint32_t* error_word) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const T* l = logits + row * V;
  T* d = dlogits + row * V;
  const int32_t t = targets[row];
  if (t < 0 || t >= V) {  // uniform over the block: every thread returns
    if (threadIdx.x == 0) atomicOr(error_word, kTargetOutOfRange);
    return;
  }
  float mx, s;
  row_stats(l, V, red, &mx, &s);
  const float k = scale / s;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float p = expf(load_f32(l, j) - mx) * k;
    store_f32(d, j, j == t ? p - scale : p);
  }
}

__global__ void ce_sum_kernel(const float* losses, int64_t N, double* out) {
  // One warp, fixed order per lane then a fixed shuffle tree: deterministic.
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < N; i += 32) acc += losses[i];
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x == 0) *out = acc;
}

void check(const char* op, const Tensor& logits, int64_t N) {
  expect_float_dtype(op, "logits", logits);
  WEFT_CHECK(N <= 0x7fffffff,
             std::string(op) + ": too many rows for one grid: " + std::to_string(N));
}

}  // namespace

double cross_entropy_forward(Tensor losses, const Tensor& logits, const Tensor& targets) {
  const char* op = "cross_entropy_forward";
  const int64_t V = logits.dim(-1), N = V ? logits.numel() / V : 0;
  check(op, logits, N);
  expect_cuda_dtype(op, "losses", losses, DType::F32);
  CudaContext& ctx = CudaContext::current();
  if (N == 0) {
    ctx.sync_and_check(op);
    return 0.0;
  }
  WEFT_CHECK(V > 0, "cross_entropy_forward: empty vocabulary (logits " + logits.shape.str() + ")");
  dispatch_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    ce_fwd_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, ctx.compute_stream()>>>(
        static_cast<float*>(losses.data), static_cast<const T*>(logits.data),
        static_cast<const int32_t*>(targets.data), V, ctx.error_word());
  });
  CUDA_CHECK_LAUNCH();
  ce_sum_kernel<<<1, 32, 0, ctx.compute_stream()>>>(static_cast<const float*>(losses.data), N,
                                                    ctx.host_result());
  CUDA_CHECK_LAUNCH();
  ctx.sync_and_check(op);
  return *ctx.host_result() / static_cast<double>(N);
}

void cross_entropy_backward(Tensor dlogits, const Tensor& logits, const Tensor& targets,
                            float scale) {
  const char* op = "cross_entropy_backward";
  const int64_t V = logits.dim(-1), N = V ? logits.numel() / V : 0;
  check(op, logits, N);
  expect_same_dtype(op, "dlogits", dlogits, logits, "logits");
  if (N == 0) return;
  CudaContext& ctx = CudaContext::current();
  dispatch_float(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    ce_bwd_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, ctx.compute_stream()>>>(
        static_cast<T*>(dlogits.data), static_cast<const T*>(logits.data),
        static_cast<const int32_t*>(targets.data), V, scale, ctx.error_word());
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace weft::cuda
