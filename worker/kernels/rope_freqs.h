// RoPE frequencies, shared by the CPU kernel and the CUDA kernel's host table.
// defines: Rope, rope_inv_freq.
//
// Unscaled (rope_type default): inv_freq[i] = theta^(-2i/D), i < D/2.
// Llama 3 (rope_type llama3; transformers' _compute_llama3_parameters): with
// wavelen = 2 pi / inv_freq, L = original_max_position,
//   wavelen < L / high_freq_factor:  inv_freq unchanged (high frequencies)
//   wavelen > L / low_freq_factor:   inv_freq / factor  (low frequencies)
//   otherwise, s = (L / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor):
//                                    (1 - s) * inv_freq / factor + s * inv_freq
// The attention factor of llama3 is 1: cos and sin are not rescaled.
// Everything is formed in double (the angles p * inv_freq are too).
#pragma once

#include <cmath>
#include <cstdint>

namespace weft {

struct Rope {
  double theta = 10000;  // base
  // Llama 3 scaling; factor == 0: none (rope_type default).
  double factor = 0;
  double low_freq_factor = 0;
  double high_freq_factor = 0;
  double original_max_position = 0;

  Rope() = default;
  // A plain theta is unscaled RoPE (so `ops::rope_forward(out, x, 10000.0f)` reads as before).
  Rope(double base) : theta(base) {}  // NOLINT(google-explicit-constructor)
  static Rope llama3(double theta, double factor, double low_freq_factor, double high_freq_factor,
                     double original_max_position) {
    Rope r(theta);
    r.factor = factor;
    r.low_freq_factor = low_freq_factor;
    r.high_freq_factor = high_freq_factor;
    r.original_max_position = original_max_position;
    return r;
  }
  bool scaled() const { return factor != 0; }
  // Spelled out: nvcc compiles this header as C++17.
  bool operator==(const Rope& o) const {
    return theta == o.theta && factor == o.factor && low_freq_factor == o.low_freq_factor &&
           high_freq_factor == o.high_freq_factor && original_max_position == o.original_max_position;
  }
};

// Inverse frequency of channel pair i (0 <= i < D/2) of a head of width D.
inline double rope_inv_freq(const Rope& r, int64_t i, int64_t D) {
  const double inv_freq = std::pow(r.theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
  if (!r.scaled()) return inv_freq;
  constexpr double kPi = 3.14159265358979323846;
  const double wavelen = 2 * kPi / inv_freq;
  const double low_freq_wavelen = r.original_max_position / r.low_freq_factor;
  const double high_freq_wavelen = r.original_max_position / r.high_freq_factor;
  if (wavelen < high_freq_wavelen) return inv_freq;
  if (wavelen > low_freq_wavelen) return inv_freq / r.factor;
  const double smooth =
      (r.original_max_position / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  return (1 - smooth) * inv_freq / r.factor + smooth * inv_freq;
}

}  // namespace weft
