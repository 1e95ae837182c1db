#include "support/host_speed.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace weft::testing {

double host_scale() {
  static const double scale = [] {
    if (const char* env = std::getenv("WEFT_TEST_TIME_SCALE"); env && *env)
      return std::clamp(std::atof(env), 1.0, 20.0);
    double best_ms = 1e9;
    for (int round = 0; round < 3; ++round) {
      const auto t0 = std::chrono::steady_clock::now();
      volatile uint64_t x = 1;  // a dependent chain the compiler cannot fold
      for (int i = 0; i < 20'000'000; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
      const auto t1 = std::chrono::steady_clock::now();
      best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    return std::clamp(best_ms / 30.0, 1.0, 10.0);
  }();
  return scale;
}

std::chrono::milliseconds scaled(std::chrono::milliseconds d) {
  return std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(d.count()) * host_scale()));
}

}  // namespace weft::testing
