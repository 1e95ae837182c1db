// RoPE, rotate_half convention. One thread per (row, head, group of pairs):
// a group is one 16-byte pack of the head's first half (8 bf16 or 4 f32
// pairs j < D/2) with its partner pack in the second half, read in two
// loads with the group's cos/sin as float4s, or one pair where D/2 is not a
// whole number of packs. A thread reads both elements of its pairs before
// writing either, so out may alias x. Index math is 32-bit when the tensor
// and the table allow (int64 division cost more than the loads).
// The angles p * inv_freq[j] (kernels/rope_freqs.h: theta^(-2j/D), or Llama
// 3's scaled bands) are formed and reduced in double on the host, by the same
// function as the CPU kernel's (in fp32, p ~ 4096 would leave only ~1e-3 rad
// of angle precision), rounded to f32 cos/sin once, and kept on the device per
// (rope parameters, D), grown as longer positions are asked for. Forming them
// on the device for every element instead (double pow and sincos per element)
// cost about 10x the memory time of the op on an H100.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/rope_freqs.h"

namespace weft::cuda {
namespace {

struct RopeTable {
  float2* cos_sin = nullptr;  // [positions, D/2] of (cos, sin)
  int64_t positions = 0;
};

// The table for positions [0, positions) of (rope, D) on the current device.
const float2* rope_table(CudaContext& ctx, const Rope& rope, int64_t D, int64_t positions) {
  // Per thread (each thread drives one device's stream), kept for the process.
  using Key = std::tuple<int, double, double, double, double, double, int64_t>;
  thread_local auto* tables = new std::map<Key, RopeTable>();
  RopeTable& t = (*tables)[Key{ctx.device(), rope.theta, rope.factor, rope.low_freq_factor, rope.high_freq_factor,
                               rope.original_max_position, D}];
  if (t.positions >= positions) return t.cos_sin;
  const int64_t half = D / 2;
  const int64_t cap = std::max<int64_t>({positions, 2 * t.positions, 1024});
  std::vector<float2> host(static_cast<size_t>(cap * half));
  for (int64_t j = 0; j < half; ++j) {
    const double inv_freq = rope_inv_freq(rope, j, D);
    for (int64_t p = 0; p < cap; ++p) {
      const double a = static_cast<double>(p) * inv_freq;
      host[p * half + j] = make_float2(static_cast<float>(std::cos(a)), static_cast<float>(std::sin(a)));
    }
  }
  auto* dev = static_cast<float2*>(device_alloc(host.size() * sizeof(float2)));
  CUDA_CHECK(cudaMemcpyAsync(dev, host.data(), host.size() * sizeof(float2), cudaMemcpyHostToDevice,
                             ctx.compute_stream()));
  // The host table dies here, and the old table may still be read by queued kernels.
  CUDA_CHECK(cudaStreamSynchronize(ctx.compute_stream()));
  if (t.cos_sin) device_free(t.cos_sin);
  t = {dev, cap};
  return t.cos_sin;
}

constexpr int kThreads = 256;

// Item i = (row, g): row = (b * T + t) * H + h, g the group of pairs. The
// row's position is pos0 + t, or positions[b * T + t] (packed documents).
template <typename T, bool kVec, typename I>
__global__ void rope_kernel(T* out, const T* x, const float2* table, const int32_t* positions, I items, I groups,
                            I Tn, I H, I half, I pos0, float sign) {
  using W = Packs<T, kVec>;
  constexpr int P = W::P;
  for (I i = blockIdx.x * I{kThreads} + threadIdx.x; i < items; i += I{gridDim.x} * I{kThreads}) {
    const I row = i / groups, g = i - row * groups;
    const I bt = row / H;
    const I pos = positions ? static_cast<I>(positions[bt]) : pos0 + bt % Tn;
    const float2* cs = table + pos * half + g * P;
    float c[P], s[P];
    if constexpr (kVec) {
      for (int k = 0; k < P / 2; ++k) {  // 16-byte aligned: half and g * P are even
        const float4 q = reinterpret_cast<const float4*>(cs)[k];
        c[2 * k] = q.x;
        s[2 * k] = sign * q.y;
        c[2 * k + 1] = q.z;
        s[2 * k + 1] = sign * q.w;
      }
    } else {
      c[0] = cs[0].x;
      s[0] = sign * cs[0].y;
    }
    const T* xr = x + row * 2 * half;
    T* o = out + row * 2 * half;
    float lo[P], hi[P], nlo[P], nhi[P];
    W::load(xr, g, lo);
    W::load(xr + half, g, hi);
    for (int k = 0; k < P; ++k) {
      nlo[k] = lo[k] * c[k] - hi[k] * s[k];
      nhi[k] = hi[k] * c[k] + lo[k] * s[k];
    }
    W::store(o, g, nlo);
    W::store(o + half, g, nhi);
  }
}

void rope(const char* op, Tensor out, const Tensor& x, const Rope& rope, int64_t pos0, const int32_t* positions,
          float sign) {
  expect_float_dtype(op, "input", x);
  expect_same_dtype(op, "output", out, x, "input");
  const int64_t B = x.dim(0), Tn = x.dim(1), H = x.dim(2), D = x.dim(3);
  const int64_t rows = B * Tn * H, half = D / 2;
  if (rows == 0 || D == 0) return;
  CudaContext& ctx = CudaContext::current();
  const float2* table = rope_table(ctx, rope, D, pos0 + Tn);
  // Packs of the first half and of the second (at + half) are both aligned
  // when half is a whole number of packs.
  const bool vec = packed_rows(x, half) && packed_rows(out, half);
  dispatch_packed(x.dtype, vec, [&](auto tag, auto v) {
    using T = decltype(tag);
    constexpr bool kVec = decltype(v)::value;
    const int64_t groups = half / Packs<T, kVec>::P, items = rows * groups;
    const unsigned grid = blocks_for(items, kThreads);
    auto launch = [&](auto index) {
      using I = decltype(index);
      rope_kernel<T, kVec, I><<<grid, kThreads, 0, ctx.compute_stream()>>>(
          static_cast<T*>(out.data), static_cast<const T*>(x.data), table, positions, I(items), I(groups),
          I(Tn), I(H), I(half), I(pos0), sign);
    };
    // Every index the kernel forms (elements, table entries, items) below 2^32.
    const int64_t largest = std::max({rows * D, (pos0 + Tn) * half, items + int64_t{grid} * kThreads});
    if (largest < (int64_t{1} << 32))
      launch(uint32_t{});
    else
      launch(int64_t{});
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(Tensor out, const Tensor& x, const Rope& r, int64_t pos0, const int32_t* positions) {
  rope("rope_forward", out, x, r, pos0, positions, 1.0f);
}

void rope_backward(Tensor dx, const Tensor& dout, const Rope& r, int64_t pos0, const int32_t* positions) {
  rope("rope_backward", dx, dout, r, pos0, positions, -1.0f);
}

}  // namespace weft::cuda
