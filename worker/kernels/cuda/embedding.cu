// Token embedding. A token outside [0, V) cannot abort from a kernel, so it
// sets kTokenOutOfRange in the context's error word (reported at the next
// sync_and_check, e.g. the cross-entropy forward of the same step), writes
// zeros in forward and is skipped in backward.
//
// Backward accumulates with fp32 atomicAdd: rows for a repeated token are
// summed in an unspecified order, so dweight_acc is not bit-reproducible
// across runs when a batch repeats tokens (within fp32 rounding of the CPU).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace weft::cuda {
namespace {

template <typename T>
__global__ void embedding_fwd_kernel(T* out, const int32_t* tokens, const T* weight, int64_t N,
                                     int64_t C, int64_t V, uint32_t* error_word) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < N * C;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / C, c = i - n * C;
    const int32_t tok = tokens[n];
    if (tok < 0 || tok >= V) {
      if (c == 0) atomicOr(error_word, kTokenOutOfRange);
      store_f32(out, i, 0.0f);
    } else {
      out[i] = weight[static_cast<int64_t>(tok) * C + c];
    }
  }
}

template <typename T>
__global__ void embedding_bwd_kernel(float* dweight, const int32_t* tokens, const T* dout,
                                     int64_t N, int64_t C, int64_t V, uint32_t* error_word) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < N * C;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / C, c = i - n * C;
    const int32_t tok = tokens[n];
    if (tok < 0 || tok >= V) {
      if (c == 0) atomicOr(error_word, kTokenOutOfRange);
      continue;
    }
    atomicAdd(dweight + static_cast<int64_t>(tok) * C + c, load_f32(dout, i));
  }
}

}  // namespace

void embedding_forward(Tensor out, const Tensor& tokens, const Tensor& weight) {
  const char* op = "embedding_forward";
  expect_float_dtype(op, "weight", weight);
  expect_same_dtype(op, "out", out, weight, "weight");
  const int64_t N = tokens.numel(), C = weight.dim(1), V = weight.dim(0);
  if (N * C == 0) return;
  CudaContext& ctx = CudaContext::current();
  dispatch_float(weight.dtype, [&](auto t) {
    using T = decltype(t);
    embedding_fwd_kernel<T><<<blocks_for(N * C, 256), 256, 0, ctx.compute_stream()>>>(
        static_cast<T*>(out.data), static_cast<const int32_t*>(tokens.data),
        static_cast<const T*>(weight.data), N, C, V, ctx.error_word());
  });
  CUDA_CHECK_LAUNCH();
}

void embedding_backward(Tensor dweight_acc, const Tensor& tokens, const Tensor& dout) {
  const char* op = "embedding_backward";
  expect_cuda_dtype(op, "dweight_acc", dweight_acc, DType::F32);
  expect_float_dtype(op, "dout", dout);
  const int64_t N = tokens.numel(), C = dweight_acc.dim(1), V = dweight_acc.dim(0);
  if (N * C == 0) return;
  CudaContext& ctx = CudaContext::current();
  dispatch_float(dout.dtype, [&](auto t) {
    using T = decltype(t);
    embedding_bwd_kernel<T><<<blocks_for(N * C, 256), 256, 0, ctx.compute_stream()>>>(
        static_cast<float*>(dweight_acc.data), static_cast<const int32_t*>(tokens.data),
        static_cast<const T*>(dout.data), N, C, V, ctx.error_word());
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace weft::cuda
