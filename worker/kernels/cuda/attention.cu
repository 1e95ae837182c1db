// Causal attention with grouped KV heads, flash-style: scores exist only one
// 32-key tile at a time, in registers; no [T, T] buffer, forward or backward.
//
// Layout: every kernel works on 32-row tiles. Within a warp, lanes split the
// head dimension (lane owns d = lane + 32c, c < 4, so D <= 128) and a dot
// product over D is a warp_sum; this keeps every per-row quantity
// (running max, sum, output accumulator) warp-uniform, so masking decisions
// never diverge inside a warp and all shuffles are full-warp. All math fp32.
//
// Forward (grid: query tile x Hq x B, 4 warps x 8 query rows): online softmax
// over key tiles held in shared memory; lse = m + log(l) is saved.
// Backward recomputes probabilities from lse (P = exp(s - lse)):
//   dsum[i] = sum_d dO[i,d] O[i,d]                        (attn_dsum_kernel)
//   dS_ij   = P_ij (dO_i . V_j - dsum_i)
//   dQ_i    = scale sum_j dS_ij K_j     (attn_dq_kernel: per query tile)
//   dK_j    = scale sum_{h in group, i} dS_ij Q_i,
//   dV_j    = sum_{h in group, i} P_ij dO_i  (attn_dkv_kernel: per key tile)
// Each output element is written by exactly one thread: no atomics, results
// are deterministic.
// Packed documents: with starts (I32 [B, T] on the device), query row i sees
// keys [starts[b, i], i] only; a row's start is warp-uniform like the row, so
// the extra mask never diverges either.
#include <cmath>
#include <initializer_list>
#include <string>

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cudnn_attention.h"

namespace weft::cuda {
namespace {

constexpr int kTile = 32;              // query rows or keys per tile
constexpr int kMaxD = 128;             // == kMaxHeadDim
constexpr int kDPerLane = kMaxD / 32;  // head-dim elements per lane
constexpr int kRowWarps = 4;           // forward / dq: warps per block
constexpr int kRowsPerWarp = kTile / kRowWarps;
constexpr int kKeyWarps = 8;  // dkv: warps per block
constexpr int kKeysPerWarp = kTile / kKeyWarps;
static_assert(kMaxD == kMaxHeadDim, "cuda_ops.h advertises kMaxHeadDim");

struct Dims {
  int B, T, Hq, Hkv, D;
  float scale;  // 1/sqrt(D)
  const int32_t* starts;  // packed documents' first key of each row, [B, T]; nullptr: 0
};

__device__ __forceinline__ int first_key(const Dims& s, int b, int t) {
  return s.starts ? s.starts[static_cast<int64_t>(b) * s.T + t] : 0;
}

__device__ __forceinline__ int64_t q_index(const Dims& s, int b, int t, int h) {
  return ((static_cast<int64_t>(b) * s.T + t) * s.Hq + h) * s.D;
}
__device__ __forceinline__ int64_t kv_index(const Dims& s, int b, int t, int hk) {
  return ((static_cast<int64_t>(b) * s.T + t) * s.Hkv + hk) * s.D;
}
__device__ __forceinline__ int64_t row_index(const Dims& s, int b, int h, int t) {  // lse, dsum
  return (static_cast<int64_t>(b) * s.Hq + h) * s.T + t;
}

// Loads rows [t0, t0 + kTile) of head `head` of x (row stride heads * D) into
// tile[kTile][kMaxD] as fp32; rows past T are zeros. All threads participate.
template <typename T>
__device__ void load_tile(float (*tile)[kMaxD], const T* x, const Dims& s, int b, int t0, int head,
                          int heads) {
  for (int idx = threadIdx.x; idx < kTile * s.D; idx += blockDim.x) {
    const int j = idx / s.D, d = idx - j * s.D, t = t0 + j;
    tile[j][d] = t < s.T
                     ? load_f32(x, ((static_cast<int64_t>(b) * s.T + t) * heads + head) * s.D + d)
                     : 0.0f;
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowWarps * 32)
    attn_fwd_kernel(T* out, float* lse, const T* q, const T* k, const T* v, Dims s) {
  __shared__ float ks[kTile][kMaxD];
  __shared__ float vs[kTile][kMaxD];
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kTile;
  const int hk = h / (s.Hq / s.Hkv);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  float qr[kRowsPerWarp][kDPerLane], o[kRowsPerWarp][kDPerLane];
  float m[kRowsPerWarp], l[kRowsPerWarp];
  int first[kRowsPerWarp];
  int k_begin = q0;  // the first key any row of the tile sees, rounded down to a tile
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int qi = q0 + warp * kRowsPerWarp + r;
#pragma unroll
    for (int c = 0; c < kDPerLane; ++c) {
      const int d = lane + 32 * c;
      qr[r][c] = (qi < s.T && d < s.D) ? load_f32(q, q_index(s, b, qi, h) + d) * s.scale : 0.0f;
      o[r][c] = 0.0f;
    }
    m[r] = -INFINITY;
    l[r] = 0.0f;
    first[r] = qi < s.T ? first_key(s, b, qi) : 0;
  }
  for (int i = q0; i < min(q0 + kTile, s.T); ++i) k_begin = min(k_begin, first_key(s, b, i));
  k_begin -= k_begin % kTile;

  const int q_last = min(q0 + kTile, s.T) - 1;  // keys beyond it are masked for every row
  for (int k0 = k_begin; k0 <= q_last; k0 += kTile) {
    __syncthreads();  // every warp is done with the previous tile
    load_tile(ks, k, s, b, k0, hk, s.Hkv);
    load_tile(vs, v, s, b, k0, hk, s.Hkv);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int qi = q0 + warp * kRowsPerWarp + r;
      if (qi >= s.T || k0 > qi || k0 + kTile <= first[r]) continue;  // warp-uniform
      const int jmax = min(kTile, qi - k0 + 1);  // keys k0 .. k0+jmax-1 are <= qi (< T)
      const int jmin = max(0, first[r] - k0);    // and k0+jmin .. are in the row's document
      float my_s = -INFINITY;                    // lane j holds the score of key k0 + j
      for (int j = jmin; j < jmax; ++j) {
        float part = 0.0f;
#pragma unroll
        for (int c = 0; c < kDPerLane; ++c) {
          const int d = lane + 32 * c;
          if (d < s.D) part += qr[r][c] * ks[j][d];
        }
        const float sc = warp_sum(part);
        if (lane == j) my_s = sc;
      }
      const float m_new = fmaxf(m[r], warp_max(my_s));  // finite: jmax > jmin
      const float corr = expf(m[r] - m_new);            // 0 on the first tile
      const float p = lane >= jmin && lane < jmax ? expf(my_s - m_new) : 0.0f;
      l[r] = l[r] * corr + warp_sum(p);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < kDPerLane; ++c) o[r][c] *= corr;
      for (int j = jmin; j < jmax; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
        for (int c = 0; c < kDPerLane; ++c) {
          const int d = lane + 32 * c;
          if (d < s.D) o[r][c] += pj * vs[j][d];
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int qi = q0 + warp * kRowsPerWarp + r;
    if (qi >= s.T) continue;
    const float inv = 1.0f / l[r];  // l >= 1: the max key contributes exp(0)
#pragma unroll
    for (int c = 0; c < kDPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d < s.D) store_f32(out, q_index(s, b, qi, h) + d, o[r][c] * inv);
    }
    if (lane == 0) lse[row_index(s, b, h, qi)] = m[r] + logf(l[r]);
  }
}

// One warp per (b, t, h) row: dsum = dO . O.
template <typename T>
__global__ void attn_dsum_kernel(float* dsum, const T* dout, const T* out, Dims s) {
  const int64_t rows = static_cast<int64_t>(s.B) * s.T * s.Hq;
  const int lane = threadIdx.x & 31;
  const int64_t warps_total = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t row = blockIdx.x * int64_t{blockDim.x >> 5} + (threadIdx.x >> 5); row < rows;
       row += warps_total) {
    float part = 0.0f;
    for (int d = lane; d < s.D; d += 32)
      part += load_f32(dout, row * s.D + d) * load_f32(out, row * s.D + d);
    part = warp_sum(part);
    if (lane == 0) {
      const int h = static_cast<int>(row % s.Hq);
      const int64_t bt = row / s.Hq;
      const int t = static_cast<int>(bt % s.T), b = static_cast<int>(bt / s.T);
      dsum[row_index(s, b, h, t)] = part;
    }
  }
}

// dQ for one (query tile, head, batch); same row mapping as the forward.
template <typename T>
__global__ void __launch_bounds__(kRowWarps * 32)
    attn_dq_kernel(T* dq, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                   const float* dsum, Dims s) {
  __shared__ float ks[kTile][kMaxD];
  __shared__ float vs[kTile][kMaxD];
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kTile;
  const int hk = h / (s.Hq / s.Hkv);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  float qr[kRowsPerWarp][kDPerLane], dor[kRowsPerWarp][kDPerLane], acc[kRowsPerWarp][kDPerLane];
  float lse_r[kRowsPerWarp], dsum_r[kRowsPerWarp];
  int first[kRowsPerWarp];
  int k_begin = q0;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int qi = q0 + warp * kRowsPerWarp + r;
    const bool ok = qi < s.T;
    first[r] = ok ? first_key(s, b, qi) : 0;
#pragma unroll
    for (int c = 0; c < kDPerLane; ++c) {
      const int d = lane + 32 * c;
      qr[r][c] = ok && d < s.D ? load_f32(q, q_index(s, b, qi, h) + d) : 0.0f;
      dor[r][c] = ok && d < s.D ? load_f32(dout, q_index(s, b, qi, h) + d) : 0.0f;
      acc[r][c] = 0.0f;
    }
    lse_r[r] = ok ? lse[row_index(s, b, h, qi)] : 0.0f;
    dsum_r[r] = ok ? dsum[row_index(s, b, h, qi)] : 0.0f;
  }
  for (int i = q0; i < min(q0 + kTile, s.T); ++i) k_begin = min(k_begin, first_key(s, b, i));
  k_begin -= k_begin % kTile;

  const int q_last = min(q0 + kTile, s.T) - 1;
  for (int k0 = k_begin; k0 <= q_last; k0 += kTile) {
    __syncthreads();
    load_tile(ks, k, s, b, k0, hk, s.Hkv);
    load_tile(vs, v, s, b, k0, hk, s.Hkv);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int qi = q0 + warp * kRowsPerWarp + r;
      if (qi >= s.T || k0 > qi || k0 + kTile <= first[r]) continue;  // warp-uniform
      const int jmax = min(kTile, qi - k0 + 1);
      for (int j = max(0, first[r] - k0); j < jmax; ++j) {
        float sp = 0.0f, dp = 0.0f;
#pragma unroll
        for (int c = 0; c < kDPerLane; ++c) {
          const int d = lane + 32 * c;
          if (d < s.D) {
            sp += qr[r][c] * ks[j][d];
            dp += dor[r][c] * vs[j][d];
          }
        }
        const float p = expf(warp_sum(sp) * s.scale - lse_r[r]);
        const float ds = p * (warp_sum(dp) - dsum_r[r]);
#pragma unroll
        for (int c = 0; c < kDPerLane; ++c) {
          const int d = lane + 32 * c;
          if (d < s.D) acc[r][c] += ds * ks[j][d];
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int qi = q0 + warp * kRowsPerWarp + r;
    if (qi >= s.T) continue;
#pragma unroll
    for (int c = 0; c < kDPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d < s.D) store_f32(dq, q_index(s, b, qi, h) + d, acc[r][c] * s.scale);
    }
  }
}

// dK, dV for one (key tile, kv head, batch): 8 warps x 4 keys; loops over the
// query heads of the group and the query tiles at or after the key tile.
template <typename T>
__global__ void __launch_bounds__(kKeyWarps * 32)
    attn_dkv_kernel(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                    const float* lse, const float* dsum, Dims s) {
  __shared__ float qs[kTile][kMaxD];
  __shared__ float dos[kTile][kMaxD];
  __shared__ float lse_s[kTile], dsum_s[kTile];
  __shared__ int first_s[kTile];
  const int b = blockIdx.z, hk = blockIdx.y, k0 = blockIdx.x * kTile;
  const int group = s.Hq / s.Hkv;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  float kr[kKeysPerWarp][kDPerLane], vr[kKeysPerWarp][kDPerLane];
  float dkr[kKeysPerWarp][kDPerLane], dvr[kKeysPerWarp][kDPerLane];
#pragma unroll
  for (int jj = 0; jj < kKeysPerWarp; ++jj) {
    const int kj = k0 + warp * kKeysPerWarp + jj;
#pragma unroll
    for (int c = 0; c < kDPerLane; ++c) {
      const int d = lane + 32 * c;
      const bool ok = kj < s.T && d < s.D;
      kr[jj][c] = ok ? load_f32(k, kv_index(s, b, kj, hk) + d) : 0.0f;
      vr[jj][c] = ok ? load_f32(v, kv_index(s, b, kj, hk) + d) : 0.0f;
      dkr[jj][c] = 0.0f;
      dvr[jj][c] = 0.0f;
    }
  }

  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    for (int q0 = k0; q0 < s.T; q0 += kTile) {  // k0 is a tile start: rows < k0 see no key here
      __syncthreads();
      load_tile(qs, q, s, b, q0, h, s.Hq);
      load_tile(dos, dout, s, b, q0, h, s.Hq);
      if (threadIdx.x < kTile) {
        const int qi = q0 + threadIdx.x;
        lse_s[threadIdx.x] = qi < s.T ? lse[row_index(s, b, h, qi)] : 0.0f;
        dsum_s[threadIdx.x] = qi < s.T ? dsum[row_index(s, b, h, qi)] : 0.0f;
        first_s[threadIdx.x] = qi < s.T ? first_key(s, b, qi) : 0;
      }
      __syncthreads();
      const int imax = min(kTile, s.T - q0);
      for (int i = 0; i < imax; ++i) {
        const int qi = q0 + i;
#pragma unroll
        for (int jj = 0; jj < kKeysPerWarp; ++jj) {
          const int kj = k0 + warp * kKeysPerWarp + jj;
          if (kj >= s.T || kj > qi || kj < first_s[i]) continue;  // warp-uniform
          float sp = 0.0f, dp = 0.0f;
#pragma unroll
          for (int c = 0; c < kDPerLane; ++c) {
            const int d = lane + 32 * c;
            if (d < s.D) {
              sp += qs[i][d] * kr[jj][c];
              dp += dos[i][d] * vr[jj][c];
            }
          }
          const float p = expf(warp_sum(sp) * s.scale - lse_s[i]);
          const float ds = p * (warp_sum(dp) - dsum_s[i]);
#pragma unroll
          for (int c = 0; c < kDPerLane; ++c) {
            const int d = lane + 32 * c;
            if (d < s.D) {
              dvr[jj][c] += p * dos[i][d];
              dkr[jj][c] += ds * qs[i][d];
            }
          }
        }
      }
    }
  }

#pragma unroll
  for (int jj = 0; jj < kKeysPerWarp; ++jj) {
    const int kj = k0 + warp * kKeysPerWarp + jj;
    if (kj >= s.T) continue;
#pragma unroll
    for (int c = 0; c < kDPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d < s.D) {
        store_f32(dk, kv_index(s, b, kj, hk) + d, dkr[jj][c] * s.scale);
        store_f32(dv, kv_index(s, b, kj, hk) + d, dvr[jj][c]);
      }
    }
  }
}

Dims dims_of(const char* op, const Tensor& q, const Tensor& k, const int32_t* starts) {
  const int64_t B = q.dim(0), T = q.dim(1), Hq = q.dim(2), D = q.dim(3), Hkv = k.dim(2);
  WEFT_CHECK(D >= 1 && D <= kMaxD, std::string(op) + ": head dim " + std::to_string(D) + " (q " +
                                       q.shape.str() +
                                       ") outside the CUDA kernel's "
                                       "supported range [1, " +
                                       std::to_string(kMaxD) + "]");
  WEFT_CHECK(B <= 65535 && Hq <= 65535 && T <= (int64_t{1} << 30),
             std::string(op) + ": q " + q.shape.str() + " exceeds the launch grid limits");
  return Dims{static_cast<int>(B),
              static_cast<int>(T),
              static_cast<int>(Hq),
              static_cast<int>(Hkv),
              static_cast<int>(D),
              static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))),
              starts};
}

// cuDNN's graphs here have no per-document mask: packed documents run on the
// SIMT kernels, and a mode that demands cuDNN is refused rather than ignored.
bool cudnn_may_run(const char* op, const int32_t* starts) {
  if (!starts) return true;
  WEFT_CHECK(attention_mode() != AttentionMode::Cudnn,
             std::string(op) + ": packed documents run on weft's SIMT attention kernels, not cuDNN "
                               "(train.attention is cudnn)");
  return false;
}

void check_dtypes(const char* op, const Tensor& q, std::initializer_list<const Tensor*> same,
                  const Tensor& lse) {
  expect_float_dtype(op, "q", q);
  for (const Tensor* t : same) expect_same_dtype(op, "operand", *t, q, "q");
  expect_cuda_dtype(op, "lse", lse, DType::F32);
}

void launch_simt_forward(Tensor out, Tensor lse, const Tensor& q, const Tensor& k, const Tensor& v, const Dims& s);
void launch_simt_backward(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& out, const Tensor& lse, const Dims& s);

}  // namespace

void attention_forward(Tensor out, Tensor lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const int32_t* starts) {
  const char* op = "attention_forward";
  check_dtypes(op, q, {&k, &v, &out}, lse);
  const Dims s = dims_of(op, q, k, starts);
  if (s.B == 0 || s.T == 0 || s.Hq == 0) return;
  if (cudnn_may_run(op, starts) && cudnn_attention_forward(out, lse, q, k, v)) return;
  launch_simt_forward(out, lse, q, k, v, s);
}

void simt_attention_forward(Tensor out, Tensor lse, const Tensor& q, const Tensor& k, const Tensor& v,
                            const int32_t* starts) {
  const char* op = "attention_forward";
  check_dtypes(op, q, {&k, &v, &out}, lse);
  const Dims s = dims_of(op, q, k, starts);
  if (s.B == 0 || s.T == 0 || s.Hq == 0) return;
  launch_simt_forward(out, lse, q, k, v, s);
}

namespace {

void launch_simt_forward(Tensor out, Tensor lse, const Tensor& q, const Tensor& k, const Tensor& v, const Dims& s) {
  const dim3 grid((s.T + kTile - 1) / kTile, s.Hq, s.B);
  dispatch_float(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    attn_fwd_kernel<T><<<grid, kRowWarps * 32, 0, CudaContext::current().compute_stream()>>>(
        static_cast<T*>(out.data), static_cast<float*>(lse.data), static_cast<const T*>(q.data),
        static_cast<const T*>(k.data), static_cast<const T*>(v.data), s);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_backward(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const int32_t* starts) {
  const char* op = "attention_backward";
  check_dtypes(op, q, {&k, &v, &out, &dout, &dq, &dk, &dv}, lse);
  const Dims s = dims_of(op, q, k, starts);
  if (s.B == 0 || s.T == 0 || s.Hq == 0) return;
  if (cudnn_may_run(op, starts) && cudnn_attention_backward(dq, dk, dv, dout, q, k, v, out, lse)) return;
  launch_simt_backward(dq, dk, dv, dout, q, k, v, out, lse, s);
}

void simt_attention_backward(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout, const Tensor& q,
                             const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                             const int32_t* starts) {
  const char* op = "attention_backward";
  check_dtypes(op, q, {&k, &v, &out, &dout, &dq, &dk, &dv}, lse);
  const Dims s = dims_of(op, q, k, starts);
  if (s.B == 0 || s.T == 0 || s.Hq == 0) return;
  launch_simt_backward(dq, dk, dv, dout, q, k, v, out, lse, s);
}

namespace {

void launch_simt_backward(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& out, const Tensor& lse, const Dims& s) {
  cudaStream_t stream = CudaContext::current().compute_stream();
  const int64_t rows = static_cast<int64_t>(s.B) * s.T * s.Hq;
  // Freed right after the launches: the allocator reuses blocks in compute-
  // stream order, so a later owner's kernels run after ours.
  float* dsum = static_cast<float*>(device_alloc(sizeof(float) * static_cast<size_t>(rows)));
  dispatch_float(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    attn_dsum_kernel<T><<<blocks_for(rows, 8), 256, 0, stream>>>(
        dsum, static_cast<const T*>(dout.data), static_cast<const T*>(out.data), s);
    CUDA_CHECK_LAUNCH();
    const dim3 qgrid((s.T + kTile - 1) / kTile, s.Hq, s.B);
    attn_dq_kernel<T><<<qgrid, kRowWarps * 32, 0, stream>>>(
        static_cast<T*>(dq.data), static_cast<const T*>(dout.data), static_cast<const T*>(q.data),
        static_cast<const T*>(k.data), static_cast<const T*>(v.data),
        static_cast<const float*>(lse.data), dsum, s);
    CUDA_CHECK_LAUNCH();
    const dim3 kgrid((s.T + kTile - 1) / kTile, s.Hkv, s.B);
    attn_dkv_kernel<T><<<kgrid, kKeyWarps * 32, 0, stream>>>(
        static_cast<T*>(dk.data), static_cast<T*>(dv.data), static_cast<const T*>(dout.data),
        static_cast<const T*>(q.data), static_cast<const T*>(k.data), static_cast<const T*>(v.data),
        static_cast<const float*>(lse.data), dsum, s);
    CUDA_CHECK_LAUNCH();
  });
  device_free(dsum);
}

}  // namespace

}  // namespace weft::cuda
