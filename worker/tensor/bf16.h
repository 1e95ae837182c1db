// weft tensor: bf16 <-> f32 conversion on the host, round to nearest even (the
// same rounding as the GPU's __float2bfloat16_rn). Used by ops::cast on the
// CPU and by the CPU reductions of bf16 buffers. Header-only; NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>

namespace weft {

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace weft
