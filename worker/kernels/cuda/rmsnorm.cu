// RMSNorm with fp32 statistics. Forward and dx: one warp per row, eight rows a
// block (a model's rows are a few thousand bytes: a block per row spent more
// time in its two block barriers than in moving the row), in 16-byte packs
// where the row allows. Backward: dw first, then dx, so, as on the CPU, dx
// may alias dout or x: a lane reads the elements it writes and nothing else
// after the row's dot product is complete (warp_sum). With accumulate, dx += the gradient (the
// residual stream's sum, fused), and dx must alias neither input.
//
// dw sums N rows per column, in two deterministic passes: a block of 32
// column packs by 8 row lanes sums one chunk of rows into a partial row
// (each lane its rows in order, then the lanes in order), and a second kernel
// adds a column's partials in chunk order to dw_acc. A step's dw is the same
// to the bit every run, and chunks of >= 32 rows give a few hundred blocks
// at a model's sizes (gpt2-124m: N 4096, C 768 -> 3 x 128 blocks) where one
// thread per column had 48.
#include <algorithm>
#include <string>

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace weft::cuda {
namespace {

constexpr int kRowsPerBlock = 8;
constexpr int kDwRowLanes = 8;        // rows a dw block walks at once
constexpr int64_t kDwMinRows = 32;    // rows of a dw chunk, at least
constexpr int64_t kDwMaxChunks = 256; // bounds the partials at 256 C floats

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

// partial[chunk y, c] = sum over the chunk's rows n of dout[n, c] x[n, c]
// rstd[n]. Block (32 packs of columns, kDwRowLanes row lanes); lane y takes
// rows n0 + y, n0 + y + 8, ...; the lanes' sums are then added in lane order.
template <typename T, bool kVec>
__global__ void rmsnorm_dw_partial_kernel(float* partial, const T* dout, const T* x,
                                          const float* rstd, int64_t N, int64_t C, int64_t rows) {
  using W = Packs<T, kVec>;
  constexpr int P = W::P;
  __shared__ float lanes[kDwRowLanes][32 * P];
  const int64_t pack = blockIdx.x * int64_t{32} + threadIdx.x;
  const int64_t n0 = blockIdx.y * rows;
  const int64_t n1 = n0 + rows < N ? n0 + rows : N;
  float acc[P] = {};
  if (pack < C / P)
    for (int64_t n = n0 + threadIdx.y; n < n1; n += kDwRowLanes) {
      float g[P], xv[P];
      W::load(dout + n * C, pack, g);
      W::load(x + n * C, pack, xv);
      const float r = rstd[n];
      for (int k = 0; k < P; ++k) acc[k] += g[k] * xv[k] * r;
    }
  for (int k = 0; k < P; ++k) lanes[threadIdx.y][threadIdx.x * P + k] = acc[k];
  __syncthreads();
  const int64_t c0 = blockIdx.x * int64_t{32 * P};
  for (int j = threadIdx.y * 32 + threadIdx.x; j < 32 * P; j += 32 * kDwRowLanes) {
    if (c0 + j >= C) break;
    float s = lanes[0][j];
    for (int y = 1; y < kDwRowLanes; ++y) s += lanes[y][j];
    partial[blockIdx.y * C + c0 + j] = s;
  }
}

// dw[c] += the column's partials, in chunk order.
__global__ void rmsnorm_dw_sum_kernel(float* dw, const float* partial, int64_t chunks, int64_t C) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) s += partial[k * C + c];
  dw[c] += s;
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
  WEFT_CHECK(N <= 0x7fffffff, "rmsnorm_backward: too many rows for one grid: " + std::to_string(N));
  cudaStream_t s = CudaContext::current().compute_stream();
  const bool vec = packed_rows(x, C) && packed_rows(w, C) && packed_rows(dout, C) &&
                   packed_rows(dx, C);
  // Chunks of at least kDwMinRows rows, at most kDwMaxChunks of them.
  int64_t chunks = std::min((N + kDwMinRows - 1) / kDwMinRows, kDwMaxChunks);
  const int64_t rows = (N + chunks - 1) / chunks;
  chunks = (N + rows - 1) / rows;
  // The partials come from the caching allocator and go back to it after
  // the sum is queued (stream-ordered, like cuDNN's workspace).
  float* partial = static_cast<float*>(device_alloc(static_cast<size_t>(chunks * C) * sizeof(float)));
  dispatch_packed(x.dtype, vec, [&](auto t, auto v) {
    using T = decltype(t);
    constexpr bool kVec = decltype(v)::value;
    constexpr int64_t kColumns = 32 * Packs<T, kVec>::P;
    const dim3 dw_grid(static_cast<unsigned>((C + kColumns - 1) / kColumns), static_cast<unsigned>(chunks));
    rmsnorm_dw_partial_kernel<T, kVec><<<dw_grid, dim3(32, kDwRowLanes), 0, s>>>(
        partial, static_cast<const T*>(dout.data), static_cast<const T*>(x.data),
        static_cast<const float*>(rstd.data), N, C, rows);
    CUDA_CHECK_LAUNCH();
    rmsnorm_dw_sum_kernel<<<static_cast<unsigned>((C + 255) / 256), 256, 0, s>>>(
        static_cast<float*>(dw_acc.data), partial, chunks, C);
    CUDA_CHECK_LAUNCH();
    auto dx_kernel = accumulate ? rmsnorm_dx_kernel<T, kVec, true> : rmsnorm_dx_kernel<T, kVec, false>;
    dx_kernel<<<row_blocks(N), dim3(32, kRowsPerBlock), 0, s>>>(
        static_cast<T*>(dx.data), static_cast<const T*>(dout.data), static_cast<const T*>(x.data),
        static_cast<const T*>(w.data), static_cast<const float*>(rstd.data), N, C);
  });
  CUDA_CHECK_LAUNCH();
  device_free(partial);
}

}  // namespace weft::cuda
