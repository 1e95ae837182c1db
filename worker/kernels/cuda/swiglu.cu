// SwiGLU: out = silu(g) * u, silu(g) = g * sigmoid(g), all math in fp32.
// d/dg silu(g) = s (1 + g (1 - s)) with s = sigmoid(g).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace weft::cuda {
namespace {

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename T>
__global__ void swiglu_fwd_kernel(T* out, const T* gate, const T* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = load_f32(gate, i), u = load_f32(up, i);
    store_f32(out, i, g * sigmoid(g) * u);
  }
}

// Reads gate, up and dout of element i before writing dgate/dup of element i,
// so dgate or dup may alias an input.
template <typename T>
__global__ void swiglu_bwd_kernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                                  int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = load_f32(gate, i), u = load_f32(up, i), d = load_f32(dout, i);
    const float s = sigmoid(g);
    store_f32(dgate, i, d * u * s * (1.0f + g * (1.0f - s)));
    store_f32(dup, i, d * g * s);
  }
}

}  // namespace

void swiglu_forward(Tensor out, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_forward";
  expect_float_dtype(op, "gate", gate);
  expect_same_dtype(op, "up", up, gate, "gate");
  expect_same_dtype(op, "out", out, gate, "gate");
  const int64_t n = gate.numel();
  if (n == 0) return;
  dispatch_float(gate.dtype, [&](auto t) {
    using T = decltype(t);
    swiglu_fwd_kernel<T><<<blocks_for(n, 256), 256, 0, CudaContext::current().compute_stream()>>>(
        static_cast<T*>(out.data), static_cast<const T*>(gate.data), static_cast<const T*>(up.data),
        n);
  });
  CUDA_CHECK_LAUNCH();
}

void swiglu_backward(Tensor dgate, Tensor dup, const Tensor& dout, const Tensor& gate,
                     const Tensor& up) {
  const char* op = "swiglu_backward";
  expect_float_dtype(op, "gate", gate);
  expect_same_dtype(op, "up", up, gate, "gate");
  expect_same_dtype(op, "dout", dout, gate, "gate");
  expect_same_dtype(op, "dgate", dgate, gate, "gate");
  expect_same_dtype(op, "dup", dup, gate, "gate");
  const int64_t n = gate.numel();
  if (n == 0) return;
  dispatch_float(gate.dtype, [&](auto t) {
    using T = decltype(t);
    swiglu_bwd_kernel<T><<<blocks_for(n, 256), 256, 0, CudaContext::current().compute_stream()>>>(
        static_cast<T*>(dgate.data), static_cast<T*>(dup.data), static_cast<const T*>(dout.data),
        static_cast<const T*>(gate.data), static_cast<const T*>(up.data), n);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace weft::cuda
