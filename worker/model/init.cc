#include "model/init.h"

#include <cmath>

namespace weft {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t hash_name(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

void fill_normal(float* w, int64_t n, float std, uint64_t seed, uint64_t stream) {
  uint64_t state = seed ^ (stream * 0xD1B54A32D192ED03ull);
  auto uniform = [&state]() {  // (0, 1]
    return (static_cast<double>(splitmix64(state) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  };
  // Box-Muller, two values per draw.
  for (int64_t i = 0; i < n; i += 2) {
    double r = std::sqrt(-2.0 * std::log(uniform()));
    double a = 2.0 * M_PI * uniform();
    w[i] = static_cast<float>(std * r * std::cos(a));
    if (i + 1 < n) w[i + 1] = static_cast<float>(std * r * std::sin(a));
  }
}

}  // namespace weft
