// The global sample order shared by every TokenSource: which stream row a
// (step, micro, rank, b) slot holds, and the counter-based RNG that turns
// (seed, row) into that row's randomness. Because a row depends only on
// (seed, row index), a batch is a pure function of (seed, BatchIndex) and the
// split across ranks cannot change what is trained on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/token_source.h"

namespace weft {

// splitmix64's output function: a bijection on 64 bits with full avalanche.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Hash of (seed, domain, index): distinct indices give distinct values for a
// fixed seed and domain (mix64 is a bijection), and nearby seeds or indices
// give unrelated ones. `domain` keeps unrelated uses of one seed apart.
inline uint64_t hash_seed(uint64_t seed, uint64_t domain, uint64_t index) {
  return mix64(mix64(seed ^ mix64(domain + 0x9e3779b97f4a7c15ull)) + index);
}

// Domains of hash_seed; a new use of a seed gets a new one.
enum : uint64_t { kDomainMarkovChain = 1, kDomainMarkovRow = 2, kDomainShardRow = 3, kDomainHeldOut = 4 };

// splitmix64 stream: fast, statistically solid for sampling, and its output
// is fixed by this code (std:: distributions differ between libraries).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ull); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in (0, 1): safe to take the log of.
  double uniform_open() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  // Uniform in [0, n) by multiply-shift; the bias is below n / 2^64.
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

// Index in the global stream of row 0 of the batch at `at` with B rows per
// rank: ((step * grad_accum + micro) * world + rank) * B. Throws DataError for
// a BatchIndex outside its ranges (negative step, rank >= world, ...).
int64_t first_sample_row(const BatchIndex& at, int B);

// Checks B, T > 0 and sizes the batch's vectors to B*T.
void shape_batch(Batch& batch, int B, int T);

// The files a shard glob names, in byte order; DataError naming `field`
// (data.shards, eval.shards) when none match.
std::vector<std::string> expand_glob(const std::string& pattern, const std::string& field);

}  // namespace weft
