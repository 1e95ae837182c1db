// Vectorised exp for the softmax-shaped loops (cross-entropy, attention).
// defines: cpu::exp_shifted_sum, cpu::sum_exp_shifted.
// Without -ffast-math / -fno-trapping-math GCC neither vectorises std::exp
// nor if-converts a hand-written polynomial exp, so the float path is written
// with GCC/Clang vector extensions (4 float lanes = one SSE2 register). Cephes-style: x = n ln2 + r, degree-6 polynomial on r,
// 2^n built in the exponent bits. Max relative error ~1.4 ulp on
// [-87.3, 88.72]; below that 0, above +inf, NaN gives NaN. Every element,
// tail included, goes through the same vector code, so a result never depends
// on its position. The double overload uses std::exp (tests stay exact).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace weft::cpu {

namespace vec {
// 4 lanes: one SSE2 register, the x86-64 baseline this is built for.
using f32x4 = float __attribute__((vector_size(16)));
using i32x4 = int32_t __attribute__((vector_size(16)));
constexpr int kLanes = 4;

inline f32x4 splat(float v) { return f32x4{v, v, v, v}; }

inline f32x4 exp4(f32x4 x) {
  const f32x4 lo = splat(-87.3f), hi = splat(88.72f);
  f32x4 xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  // n = round(x / ln2): adding 1.5 * 2^23 rounds to nearest.
  const f32x4 round = splat(12582912.0f);
  const f32x4 n = (xc * splat(1.44269504088896341f) + round) - round;
  // r = x - n ln2 with ln2 split in two so n * 0.693359375 is exact.
  const f32x4 r = (xc - n * splat(0.693359375f)) + n * splat(2.12194440e-4f);
  f32x4 p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  const f32x4 y = p * r * r + r + splat(1.0f);
  // 2^n for n in [-126, 128] as two normal factors 2^(n/2) 2^(n - n/2).
  const i32x4 ni = __builtin_convertvector(n, i32x4), n1 = ni / 2;
  const i32x4 bias = i32x4{127, 127, 127, 127};
  const f32x4 e = y * (f32x4)((n1 + bias) << 23) * (f32x4)((ni - n1 + bias) << 23);
  const f32x4 zero = splat(0.0f), inf = splat(__builtin_inff());
  f32x4 out = x < lo ? zero : e;
  out = x > hi ? inf : out;
  return x != x ? x : out;  // NaN in, NaN out
}
}  // namespace vec

namespace vec {
// exp(in[i] - shift) for i < n, stored to out[i] when out is not null; returns
// their sum. Lanes accumulate in float over blocks of 64 elements (terms are
// <= 1 after a max shift, so a block sum is accurate to float precision) and
// blocks in double. The summation order is fixed.
inline double exp_shifted(float* out, const float* in, int64_t n, float shift) {
  constexpr int64_t kBlock = 64;
  const f32x4 s = splat(shift);
  double total = 0.0;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t b1 = b0 + kBlock < n ? b0 + kBlock : n;
    f32x4 acc = {};
    int64_t i = b0;
    for (; i + kLanes <= b1; i += kLanes) {
      f32x4 x;
      std::memcpy(&x, in + i, sizeof x);
      x = exp4(x - s);
      if (out) std::memcpy(out + i, &x, sizeof x);
      acc += x;
    }
    if (i < b1) {
      // Pad with shift (exp(0) = 1 in the unused lanes), then drop the padding.
      f32x4 x = s;
      std::memcpy(&x, in + i, sizeof(float) * (b1 - i));
      x = exp4(x - s);
      if (out) std::memcpy(out + i, &x, sizeof(float) * (b1 - i));
      for (int64_t l = 0; l < b1 - i; ++l) acc[l] += x[l];
    }
    total += static_cast<double>((acc[0] + acc[1]) + (acc[2] + acc[3]));
  }
  return total;
}

inline double exp_shifted(double* out, const double* in, int64_t n, double shift) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::exp(in[i] - shift);
    if (out) out[i] = e;
    total += e;
  }
  return total;
}
}  // namespace vec

// out[i] = exp(in[i] - shift); returns sum_i out[i]. out may alias in. For
// float the sum is meant for max-shifted rows (terms <= 1); terms near FLT_MAX
// overflow a block sum.
template <typename T>
double exp_shifted_sum(T* out, const T* in, int64_t n, T shift) {
  return vec::exp_shifted(out, in, n, shift);
}

// sum_i exp(in[i] - shift), nothing stored.
template <typename T>
double sum_exp_shifted(const T* in, int64_t n, T shift) {
  return vec::exp_shifted(static_cast<T*>(nullptr), in, n, shift);
}

}  // namespace weft::cpu
