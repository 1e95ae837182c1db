// CPU rotary position embedding, Hugging Face rotate_half convention.
// defines: cpu::rope_forward, cpu::rope_backward.
// x/out [B, T, H, D], D even; row t has position pos0 + t (pos0 > 0: a slice of a
// longer sequence, as sequence parallelism holds), or positions[b*T + t] when
// positions is given (packed documents: positions restart at each document).
// With half = D/2:
//   inv_freq[i] = rope_inv_freq(rope, i, D) (theta^(-2i/D) unscaled; kernels/rope_freqs.h),
//   angle(t, j) = t * inv_freq[j mod half],
//   out = x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[half:], x[:half]).
// Angles, cos and sin are computed in double, then cast to T.
// Instantiated for float and double (rope.cc).
#pragma once

#include <cstdint>

#include "kernels/rope_freqs.h"

namespace weft::cpu {

// out overwritten; out may alias x.
template <typename T>
void rope_forward(T* out, const T* x, int64_t B, int64_t T_, int64_t H, int64_t D, const Rope& rope,
                  int64_t pos0 = 0, const int32_t* positions = nullptr);

// dx = R(-angle) dout, the transpose of the forward rotation; dx may alias dout.
template <typename T>
void rope_backward(T* dx, const T* dout, int64_t B, int64_t T_, int64_t H, int64_t D,
                   const Rope& rope, int64_t pos0 = 0, const int32_t* positions = nullptr);

}  // namespace weft::cpu
