// RMSNorm with fp32 statistics. Forward and dx: one warp per row, eight rows a
// block (a model's rows are a few thousand bytes: a block per row spent more
// time in its two block barriers than in moving the row), in 16-byte packs
// where the row allows. Backward: dw first (column-parallel, row chunks, fp32
// atomicAdd into dw_acc), then dx, so, as on the CPU, dx may alias dout or x:
// a lane reads the elements it writes and nothing else after the row's dot
// product is complete (warp_sum). With accumulate, dx += the gradient (the
// residual stream's sum, fused), and dx must alias neither input.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace weft::cuda {
namespace {

constexpr int kRowsPerBlock = 8;
constexpr int64_t kDwRowChunk = 256;

template <typename T, bool kVec>
__global__ void rmsnorm_fwd_kernel(T* out, float* rstd, const T* x, const T* w, int64_t N,
                                   int64_t C, float eps) {
  using W = Packs<T, kVec>;
  constexpr int P = W::P;
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.y;
  if (row >= N) return;  // whole warps leave: no block barrier below
  const T* xr = x + row * C;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < C / P; i += 32) {
    float v[P];
    W::load(xr, i, v);
    for (int k = 0; k < P; ++k) ss += v[k] * v[k];
  }
  ss = warp_sum(ss);
  const float r = rsqrtf(ss / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  T* o = out + row * C;
  for (int64_t i = threadIdx.x; i < C / P; i += 32) {
    float v[P], wv[P];
    W::load(xr, i, v);
    W::load(w, i, wv);
    for (int k = 0; k < P; ++k) v[k] = v[k] * r * wv[k];
    W::store(o, i, v);
  }
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

template <typename T, bool kVec, bool kAcc>
__global__ void rmsnorm_dx_kernel(T* dx, const T* dout, const T* x, const T* w, const float* rstd,
                                  int64_t N, int64_t C) {
  using W = Packs<T, kVec>;
  constexpr int P = W::P;
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.y;
  if (row >= N) return;
  const T* g = dout + row * C;
  const T* xr = x + row * C;
  float dot = 0.0f;
  for (int64_t i = threadIdx.x; i < C / P; i += 32) {
    float gv[P], wv[P], xv[P];
    W::load(g, i, gv);
    W::load(w, i, wv);
    W::load(xr, i, xv);
    for (int k = 0; k < P; ++k) dot += gv[k] * wv[k] * xv[k];
  }
  dot = warp_sum(dot);
  const float r = rstd[row];
  const float kk = r * r * dot / static_cast<float>(C);
  T* d = dx + row * C;
  for (int64_t i = threadIdx.x; i < C / P; i += 32) {
    float gv[P], wv[P], xv[P], out[P];
    W::load(g, i, gv);
    W::load(w, i, wv);
    W::load(xr, i, xv);
    if constexpr (kAcc) W::load(d, i, out);
    for (int k = 0; k < P; ++k) {
      const float v = r * (wv[k] * gv[k] - xv[k] * kk);
      out[k] = kAcc ? out[k] + v : v;
    }
    W::store(d, i, out);
  }
}

unsigned row_blocks(int64_t N) { return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock); }

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
  const bool vec = packed_rows(x, C) && packed_rows(w, C) && packed_rows(out, C);
  dispatch_packed(x.dtype, vec, [&](auto t, auto v) {
    using T = decltype(t);
    rmsnorm_fwd_kernel<T, decltype(v)::value>
        <<<row_blocks(N), dim3(32, kRowsPerBlock), 0, CudaContext::current().compute_stream()>>>(
            static_cast<T*>(out.data), static_cast<float*>(rstd.data),
            static_cast<const T*>(x.data), static_cast<const T*>(w.data), N, C, eps);
  });
  CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(Tensor dx, Tensor dw_acc, const Tensor& dout, const Tensor& x,
                      const Tensor& w, const Tensor& rstd, bool accumulate) {
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
  const bool vec = packed_rows(x, C) && packed_rows(w, C) && packed_rows(dout, C) &&
                   packed_rows(dx, C);
  dispatch_packed(x.dtype, vec, [&](auto t, auto v) {
    using T = decltype(t);
    constexpr bool kVec = decltype(v)::value;
    const dim3 dw_grid(static_cast<unsigned>((C + 255) / 256),
                       static_cast<unsigned>((N + kDwRowChunk - 1) / kDwRowChunk));
    rmsnorm_dw_kernel<T><<<dw_grid, 256, 0, s>>>(
        static_cast<float*>(dw_acc.data), static_cast<const T*>(dout.data),
        static_cast<const T*>(x.data), static_cast<const float*>(rstd.data), N, C);
    CUDA_CHECK_LAUNCH();
    auto dx_kernel = accumulate ? rmsnorm_dx_kernel<T, kVec, true> : rmsnorm_dx_kernel<T, kVec, false>;
    dx_kernel<<<row_blocks(N), dim3(32, kRowsPerBlock), 0, s>>>(
        static_cast<T*>(dx.data), static_cast<const T*>(dout.data), static_cast<const T*>(x.data),
        static_cast<const T*>(w.data), static_cast<const float*>(rstd.data), N, C);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace weft::cuda
