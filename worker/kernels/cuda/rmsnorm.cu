// RMSNorm with fp32 statistics. Forward: one block per row (block_sum of x^2).
// Backward: dw first (column-parallel, row chunks, fp32 atomicAdd into dw_acc),
// then dx (one block per row), so, as on the CPU, dx may alias dout or x: the
// dx kernel's thread reads element c of the row before writing element c, and
// the row's dot product is complete (block_sum) before any write.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace weft::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int64_t kDwRowChunk = 256;

template <typename T>
__global__ void rmsnorm_fwd_kernel(T* out, float* rstd, const T* x, const T* w, int64_t C,
                                   float eps) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = load_f32(xr, c);
    ss += v * v;
  }
  ss = block_sum(ss, red);
  const float r = rsqrtf(ss / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  T* o = out + row * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    store_f32(o, c, load_f32(xr, c) * r * load_f32(w, c));
}

// Thread (column c, chunk y) sums dout*x*rstd over rows of its chunk.
template <typename T>
__global__ void rmsnorm_dw_kernel(float* dw, const T* dout, const T* x, const float* rstd,
                                  int64_t N, int64_t C) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  const int64_t n0 = blockIdx.y * kDwRowChunk;
  const int64_t n1 = n0 + kDwRowChunk < N ? n0 + kDwRowChunk : N;
  float acc = 0.0f;
  for (int64_t n = n0; n < n1; ++n)
    acc += load_f32(dout, n * C + c) * load_f32(x, n * C + c) * rstd[n];
  atomicAdd(dw + c, acc);
}

template <typename T>
__global__ void rmsnorm_dx_kernel(T* dx, const T* dout, const T* x, const T* w, const float* rstd,
                                  int64_t C) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const T* g = dout + row * C;
  const T* xr = x + row * C;
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dot += load_f32(g, c) * load_f32(w, c) * load_f32(xr, c);
  dot = block_sum(dot, red);
  const float r = rstd[row];
  const float k = r * r * dot / static_cast<float>(C);
  T* d = dx + row * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float gc = load_f32(g, c), xc = load_f32(xr, c);
    store_f32(d, c, r * (load_f32(w, c) * gc - xc * k));
  }
}

}  // namespace

void rmsnorm_forward(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w, float eps) {
  const char* op = "rmsnorm_forward";
  expect_float_dtype(op, "x", x);
  expect_same_dtype(op, "w", w, x, "x");
  expect_same_dtype(op, "out", out, x, "x");
  expect_cuda_dtype(op, "rstd", rstd, DType::F32);
  const int64_t C = x.dim(-1), N = C ? x.numel() / C : 0;
  if (N == 0 || C == 0) return;
  WEFT_CHECK(N <= 0x7fffffff, "rmsnorm_forward: too many rows for one grid: " + std::to_string(N));
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    rmsnorm_fwd_kernel<T>
        <<<static_cast<unsigned>(N), kRowThreads, 0, CudaContext::current().compute_stream()>>>(
            static_cast<T*>(out.data), static_cast<float*>(rstd.data),
            static_cast<const T*>(x.data), static_cast<const T*>(w.data), C, eps);
  });
  CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(Tensor dx, Tensor dw_acc, const Tensor& dout, const Tensor& x,
                      const Tensor& w, const Tensor& rstd) {
  const char* op = "rmsnorm_backward";
  expect_float_dtype(op, "x", x);
  expect_same_dtype(op, "w", w, x, "x");
  expect_same_dtype(op, "dout", dout, x, "x");
  expect_same_dtype(op, "dx", dx, x, "x");
  expect_cuda_dtype(op, "dw_acc", dw_acc, DType::F32);
  expect_cuda_dtype(op, "rstd", rstd, DType::F32);
  const int64_t C = x.dim(-1), N = C ? x.numel() / C : 0;
  if (N == 0 || C == 0) return;
  WEFT_CHECK(N <= 0x7fffffff && (N + kDwRowChunk - 1) / kDwRowChunk <= 65535,
             "rmsnorm_backward: too many rows for one grid: " + std::to_string(N));
  cudaStream_t s = CudaContext::current().compute_stream();
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    const dim3 dw_grid(static_cast<unsigned>((C + 255) / 256),
                       static_cast<unsigned>((N + kDwRowChunk - 1) / kDwRowChunk));
    rmsnorm_dw_kernel<T><<<dw_grid, 256, 0, s>>>(
        static_cast<float*>(dw_acc.data), static_cast<const T*>(dout.data),
        static_cast<const T*>(x.data), static_cast<const float*>(rstd.data), N, C);
    CUDA_CHECK_LAUNCH();
    rmsnorm_dx_kernel<T><<<static_cast<unsigned>(N), kRowThreads, 0, s>>>(
        static_cast<T*>(dx.data), static_cast<const T*>(dout.data), static_cast<const T*>(x.data),
        static_cast<const T*>(w.data), static_cast<const float*>(rstd.data), C);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace weft::cuda
