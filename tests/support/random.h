// Test support: seeded random inputs. The same arguments give the same values
// on every run (std::mt19937_64 and libstdc++'s distributions), so a failure
// reproduces and tolerances can be fitted to the data.
// defines: random_normal, random_normal_f32, random_uniform,
//          random_uniform_f32, random_tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace weft::testing {

// n draws from N(0, stddev^2), sampled in double.
std::vector<double> random_normal(size_t n, uint64_t seed, double stddev = 1.0);
// n draws from N(0, stddev^2), sampled in float: not the values of
// random_normal rounded to float.
std::vector<float> random_normal_f32(size_t n, uint64_t seed, float stddev = 1.0f);

// n draws uniform in [lo, hi).
std::vector<double> random_uniform(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);
std::vector<float> random_uniform_f32(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// n token ids uniform in [0, vocab).
std::vector<int32_t> random_tokens(size_t n, int32_t vocab, uint64_t seed);

}  // namespace weft::testing
