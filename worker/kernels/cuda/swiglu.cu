// SwiGLU: out = silu(g) * u, silu(g) = g * sigmoid(g), all math in fp32,
// elementwise over the flat tensors, in 16-byte packs when all are aligned.
// d/dg silu(g) = s (1 + g (1 - s)) with s = sigmoid(g).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace weft::cuda {
namespace {

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename T, bool kVec>
__global__ void swiglu_fwd_kernel(T* out, const T* gate, const T* up, int64_t n) {
  using W = Packs<T, kVec>;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float g[W::P], u[W::P];
    W::load(gate, i, g);
    W::load(up, i, u);
    for (int k = 0; k < W::P; ++k) g[k] = g[k] * sigmoid(g[k]) * u[k];
    W::store(out, i, g);
  }
}

// Reads gate, up and dout of element i before writing dgate/dup of element i,
// so dgate or dup may alias an input.
template <typename T, bool kVec>
__global__ void swiglu_bwd_kernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                                  int64_t n) {
  using W = Packs<T, kVec>;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float g[W::P], u[W::P], d[W::P];
    W::load(gate, i, g);
    W::load(up, i, u);
    W::load(dout, i, d);
    for (int k = 0; k < W::P; ++k) {
      const float s = sigmoid(g[k]);
      const float dg = d[k] * u[k] * s * (1.0f + g[k] * (1.0f - s));
      u[k] = d[k] * g[k] * s;
      g[k] = dg;
    }
    W::store(dgate, i, g);
    W::store(dup, i, u);
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
  const bool vec = packed_rows(gate, n) && packed_rows(up, n) && packed_rows(out, n);
  dispatch_packed(gate.dtype, vec, [&](auto t, auto v) {
    using T = decltype(t);
    const int64_t units = n / Packs<T, decltype(v)::value>::P;
    swiglu_fwd_kernel<T, decltype(v)::value>
        <<<blocks_for(units, 256), 256, 0, CudaContext::current().compute_stream()>>>(
            static_cast<T*>(out.data), static_cast<const T*>(gate.data),
            static_cast<const T*>(up.data), units);
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
  const bool vec = packed_rows(gate, n) && packed_rows(up, n) && packed_rows(dout, n) &&
                   packed_rows(dgate, n) && packed_rows(dup, n);
  dispatch_packed(gate.dtype, vec, [&](auto t, auto v) {
    using T = decltype(t);
    const int64_t units = n / Packs<T, decltype(v)::value>::P;
    swiglu_bwd_kernel<T, decltype(v)::value>
        <<<blocks_for(units, 256), 256, 0, CudaContext::current().compute_stream()>>>(
            static_cast<T*>(dgate.data), static_cast<T*>(dup.data),
            static_cast<const T*>(dout.data), static_cast<const T*>(gate.data),
            static_cast<const T*>(up.data), units);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace weft::cuda
