#include "support/random.h"

#include <random>

namespace weft::testing {
namespace {

template <typename Dist>
std::vector<typename Dist::result_type> draw(size_t n, uint64_t seed, Dist dist) {
  std::mt19937_64 gen(seed);
  std::vector<typename Dist::result_type> x(n);
  for (auto& v : x) v = dist(gen);
  return x;
}

}  // namespace

std::vector<double> random_normal(size_t n, uint64_t seed, double stddev) {
  return draw(n, seed, std::normal_distribution<double>(0.0, stddev));
}

std::vector<float> random_normal_f32(size_t n, uint64_t seed, float stddev) {
  return draw(n, seed, std::normal_distribution<float>(0.0f, stddev));
}

std::vector<double> random_uniform(size_t n, uint64_t seed, double lo, double hi) {
  return draw(n, seed, std::uniform_real_distribution<double>(lo, hi));
}

std::vector<float> random_uniform_f32(size_t n, uint64_t seed, float lo, float hi) {
  return draw(n, seed, std::uniform_real_distribution<float>(lo, hi));
}

std::vector<int32_t> random_tokens(size_t n, int32_t vocab, uint64_t seed) {
  return draw(n, seed, std::uniform_int_distribution<int32_t>(0, vocab - 1));
}

}  // namespace weft::testing
