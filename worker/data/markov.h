// A first-order Markov chain over tokens, stored compactly for sampling, with
// its stationary distribution and entropy rate. The synthetic TokenSource
// (make_markov_source) samples rows from one; tests build small ones by hand
// to check the entropy against closed forms.
//
// Invariants: every state has at least one successor; successors of a state
// are distinct; each state's probabilities are > 0 and sum to 1; stationary()
// sums to 1 and satisfies pi P = pi to about 1e-15.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/token_source.h"

namespace weft {

class MarkovChain {
 public:
  // Seeded random chain: each state gets `branching` distinct successors with
  // probabilities proportional to E^2 for E ~ Exp(1) (a Dirichlet(1) draw,
  // sharpened so states have a clear favourite and the entropy floor sits well
  // below log(branching)). One successor of every state follows a random cycle
  // through all tokens, so the chain is irreducible: every token occurs and the
  // stationary distribution is unique. Throws DataError for vocab < 2,
  // branching outside [1, vocab] or more than 2^26 transitions.
  static MarkovChain random(int vocab, int branching, uint64_t seed);

  // Hand-built chain: next[i] are state i's successors, prob[i] their
  // probabilities. Throws DataError naming the state for an empty row, a
  // successor out of range or repeated, a non-positive probability or a row
  // whose probabilities do not sum to 1 (within 1e-9; they are renormalised).
  static MarkovChain from_rows(const std::vector<std::vector<int32_t>>& next,
                               const std::vector<std::vector<double>>& prob);

  int vocab() const { return static_cast<int>(offsets_.size()) - 1; }
  // P(to | from); 0 when `to` is not a successor of `from`.
  double transition(int32_t from, int32_t to) const;
  const std::vector<double>& stationary() const { return pi_; }
  // Nats per token: sum_i pi_i H(P_i), computed in double.
  double entropy_rate() const { return entropy_rate_; }

  // Samplers from a uniform u in [0, 1) (binary search on cumulative sums).
  int32_t sample_start(double u) const;
  int32_t sample_next(int32_t state, double u) const;

 private:
  MarkovChain() = default;
  // Fills cumulative sums, pi_ and entropy_rate_ from offsets_/next_/prob_.
  void finish(bool uniform_stationary);
  void compute_stationary();

  // CSR rows: state i's successors are next_[offsets_[i] .. offsets_[i+1]).
  std::vector<int64_t> offsets_;  // [vocab + 1]
  std::vector<int32_t> next_;     // [transitions]
  std::vector<double> prob_;      // [transitions]
  std::vector<double> cum_;       // [transitions] inclusive per-row cumulative sums; row end = 1
  std::vector<double> pi_;        // [vocab]
  std::vector<double> pi_cum_;    // [vocab]
  double entropy_rate_ = 0;
};

// TokenSource over a chain. Row g of the stream is T+1 tokens: the first from
// the stationary distribution, then T transitions, all drawn from an RNG
// seeded by hash(seed, g). `name` starts describe(), e.g.
// "synthetic markov(vocab=256, branching=4, seed=1234)".
std::unique_ptr<TokenSource> make_markov_source(MarkovChain chain, uint64_t seed,
                                                std::string name);

// Seeded random first-order Markov chain over `vocab` tokens: each state moves
// to `branching` successors with random probabilities. Rows start in the
// stationary distribution, so the optimal loss is exactly the entropy rate
// H = sum_i pi_i H(P_i), computed at construction.
std::unique_ptr<TokenSource> make_markov_source(int vocab, int branching, uint64_t seed);

}  // namespace weft
