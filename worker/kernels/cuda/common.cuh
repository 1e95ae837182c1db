// Device helpers shared by the CUDA kernels (included by .cu files only):
// element load/store as fp32 for the two storage types (float, __nv_bfloat16),
// warp and block reductions, launch-size helpers, and the dtype checks used by
// every op's host side. Defines: load_f32, store_f32, load_pack, store_pack, Packs,
// warp_sum, warp_max, block_sum, blocks_for, packed_rows, expect_cuda_dtype,
// expect_float_dtype, dispatch_float, dispatch_packed.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_check.h"
#include "tensor/tensor.h"

namespace weft::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float load_f32(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_f32(const bf16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void store_f32(float* p, int64_t i, float v) { p[i] = v; }
// Round to nearest even, as the CPU conversion in tensor/bf16.h.
__device__ __forceinline__ void store_f32(bf16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

// 16-byte packs: kPack<T> elements (8 bf16, 4 f32) loaded or stored as one
// uint4, widened to / rounded from f32. Index i counts packs, so p must be
// 16-byte aligned and the range a whole number of packs (packed_rows).
template <typename T>
constexpr int kPack = 16 / sizeof(T);

template <typename T>
__device__ __forceinline__ void load_pack(const T* p, int64_t i, float* out) {
  const uint4 u = reinterpret_cast<const uint4*>(p)[i];
  if constexpr (sizeof(T) == 4) {
    const float* f = reinterpret_cast<const float*>(&u);
    for (int k = 0; k < 4; ++k) out[k] = f[k];
  } else {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(h[k]);
      out[2 * k] = f.x;
      out[2 * k + 1] = f.y;
    }
  }
}

template <typename T>
__device__ __forceinline__ void store_pack(T* p, int64_t i, const float* in) {
  uint4 u;
  if constexpr (sizeof(T) == 4) {
    float* f = reinterpret_cast<float*>(&u);
    for (int k = 0; k < 4; ++k) f[k] = in[k];
  } else {
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
    for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(in[2 * k], in[2 * k + 1]);
  }
  reinterpret_cast<uint4*>(p)[i] = u;
}

// Index i walks elements one by one, or (kVec) 16-byte packs of P elements.
template <typename T, bool kVec>
struct Packs {
  static constexpr int P = kVec ? kPack<T> : 1;
  __device__ static void load(const T* p, int64_t i, float* v) {
    if constexpr (kVec)
      load_pack(p, i, v);
    else
      v[0] = load_f32(p, i);
  }
  __device__ static void store(T* p, int64_t i, const float* v) {
    if constexpr (kVec)
      store_pack(p, i, v);
    else
      store_f32(p, i, v[0]);
  }
};

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets
// the total. `shared` holds 32 floats. Contains __syncthreads: call from all
// threads of the block.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

// Whether t can be walked in 16-byte packs in rows of `row` elements (the
// whole tensor: row = numel): 16-byte aligned and rows of whole packs.
inline bool packed_rows(const Tensor& t, int64_t row) {
  const int64_t pack = 16 / static_cast<int64_t>(dtype_size(t.dtype));
  return row % pack == 0 && reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
}

// Calls f(T{}, std::true_type{} or std::false_type{}) for t's float dtype and
// whether to take the packed path.
template <typename F>
void dispatch_packed(DType t, bool packed, F&& f) {
  auto by_layout = [&](auto tag) {
    if (packed)
      f(tag, std::true_type{});
    else
      f(tag, std::false_type{});
  };
  if (t == DType::F32)
    by_layout(float{});
  else
    by_layout(bf16{});
}

// Grid size for a grid-stride loop over n elements.
inline unsigned blocks_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535 * 16) b = 65535 * 16;
  return static_cast<unsigned>(b);
}

inline void expect_cuda_dtype(const char* op, const char* name, const Tensor& t, DType want) {
  WEFT_CHECK(t.dtype == want, std::string(op) + ": " + name + " on CUDA must be " +
                                  dtype_name(want) + ", got " + dtype_name(t.dtype) +
                                  " (see docs/cuda.md for the dtype of each operand)");
}
// Activations and parameters: bf16 or f32.
inline void expect_float_dtype(const char* op, const char* name, const Tensor& t) {
  WEFT_CHECK(
      t.dtype == DType::BF16 || t.dtype == DType::F32,
      std::string(op) + ": " + name + " on CUDA must be bf16 or f32, got " + dtype_name(t.dtype));
}
inline void expect_same_dtype(const char* op, const char* name, const Tensor& t, const Tensor& ref,
                              const char* ref_name) {
  WEFT_CHECK(t.dtype == ref.dtype, std::string(op) + ": " + name + " (" + dtype_name(t.dtype) +
                                       ") must have the dtype of " + ref_name + " (" +
                                       dtype_name(ref.dtype) + ")");
}

// Calls f(float{}) or f(bf16{}) by dtype (already checked to be one of them).
template <typename F>
void dispatch_float(DType t, F&& f) {
  if (t == DType::F32)
    f(float{});
  else
    f(bf16{});
}

}  // namespace weft::cuda
