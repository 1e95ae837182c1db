// weft comm: bf16 <-> f32 conversion for the CPU reductions (bf16 is added in
// f32 math, then rounded to nearest even). Header-only; NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>

namespace weft::comm {

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

}  // namespace weft::comm
