#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace weft::cpu {
namespace {

// For column pair (j, j + half) the forward map is a plane rotation by angle a:
//   out[j]        = x[j] cos a - x[j+half] sin a
//   out[j + half] = x[j+half] cos a + x[j] sin a
// sign = -1 rotates by -a (the backward). Both elements of a pair are read
// before either is written, which is what makes out == x safe.
template <typename T>
void rotate(T* out, const T* x, int64_t B, int64_t T_, int64_t H, int64_t D, const Rope& rope,
            T sign, int64_t pos0, const int32_t* positions) {
  const int64_t half = D / 2;
  // Table rows: positions pos0 .. pos0 + T - 1, or 0 .. the largest given.
  int64_t first = pos0, count = T_;
  if (positions) {
    first = 0;
    count = 1;
    for (int64_t bt = 0; bt < B * T_; ++bt) {
      WEFT_CHECK(positions[bt] >= 0, "rope: negative position " + std::to_string(positions[bt]));
      count = std::max<int64_t>(count, int64_t{positions[bt]} + 1);
    }
  }
  std::vector<T> cos_t(static_cast<size_t>(count * half)), sin_t(cos_t.size());
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = rope_inv_freq(rope, i, D);
    for (int64_t t = 0; t < count; ++t) {
      double a = static_cast<double>(first + t) * inv_freq;
      cos_t[t * half + i] = static_cast<T>(std::cos(a));
      sin_t[t * half + i] = static_cast<T>(std::sin(a));
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T_; ++bt) {
    const int64_t t = positions ? positions[bt] : bt % T_;
    const T* c = cos_t.data() + t * half;
    const T* s = sin_t.data() + t * half;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t off = (bt * H + h) * D;
      for (int64_t j = 0; j < half; ++j) {
        T lo = x[off + j], hi = x[off + j + half];
        T sn = sign * s[j];
        out[off + j] = lo * c[j] - hi * sn;
        out[off + j + half] = hi * c[j] + lo * sn;
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* out, const T* x, int64_t B, int64_t T_, int64_t H, int64_t D, const Rope& rope,
                  int64_t pos0, const int32_t* positions) {
  rotate<T>(out, x, B, T_, H, D, rope, T(1), pos0, positions);
}

template <typename T>
void rope_backward(T* dx, const T* dout, int64_t B, int64_t T_, int64_t H, int64_t D,
                   const Rope& rope, int64_t pos0, const int32_t* positions) {
  rotate<T>(dx, dout, B, T_, H, D, rope, T(-1), pos0, positions);
}

template void rope_forward<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t, const Rope&, int64_t, const int32_t*);
template void rope_forward<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t, const Rope&, int64_t, const int32_t*);
template void rope_backward<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t, const Rope&, int64_t, const int32_t*);
template void rope_backward<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t, const Rope&, int64_t, const int32_t*);

}  // namespace weft::cpu
