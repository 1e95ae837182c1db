// Markov chain construction, stationary distribution and the synthetic
// TokenSource. All randomness comes from SplitMix64 (sample_order.h), so a
// seed gives the same chain and the same rows on every platform.
#include "data/markov.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>

#include "data/sample_order.h"

namespace weft {
namespace {

constexpr int64_t kMaxTransitions = int64_t{1} << 26;  // 768 MiB of tables

}  // namespace

MarkovChain MarkovChain::random(int vocab, int branching, uint64_t seed) {
  if (vocab < 2) throw DataError("markov chain: vocab must be >= 2, got " + std::to_string(vocab));
  if (branching < 1 || branching > vocab) {
    throw DataError("markov chain: branching must be in [1, vocab=" + std::to_string(vocab) +
                    "], got " + std::to_string(branching));
  }
  if (int64_t{vocab} * branching > kMaxTransitions) {
    throw DataError("markov chain: vocab " + std::to_string(vocab) + " x branching " +
                    std::to_string(branching) + " transitions exceed the limit of " +
                    std::to_string(kMaxTransitions));
  }
  SplitMix64 rng(hash_seed(seed, kDomainMarkovChain, 0));
  const int n = vocab;

  // A random cycle through all tokens makes the chain irreducible.
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  for (int k = n - 1; k > 0; --k) std::swap(order[k], order[rng.below(k + 1)]);
  std::vector<int32_t> cycle_next(n);
  for (int k = 0; k < n; ++k) cycle_next[order[k]] = order[(k + 1) % n];

  // The other successors: a partial Fisher-Yates shuffle of `pool`, which stays
  // a permutation of all tokens between states, so each draw costs O(branching)
  // however large the vocabulary. The cycle successor is parked in the last
  // slot first so it is never drawn twice.
  std::vector<int32_t> pool(n), pos(n);
  std::iota(pool.begin(), pool.end(), 0);
  std::iota(pos.begin(), pos.end(), 0);
  auto swap_slots = [&](int a, int b) {
    std::swap(pool[a], pool[b]);
    pos[pool[a]] = a;
    pos[pool[b]] = b;
  };

  MarkovChain c;
  c.offsets_.resize(n + 1);
  c.next_.reserve(int64_t{n} * branching);
  c.prob_.reserve(int64_t{n} * branching);
  std::vector<double> w(branching);
  for (int i = 0; i < n; ++i) {
    c.offsets_[i] = static_cast<int64_t>(c.next_.size());
    swap_slots(pos[cycle_next[i]], n - 1);
    c.next_.push_back(cycle_next[i]);
    for (int j = 0; j < branching - 1; ++j) {
      swap_slots(j, j + static_cast<int>(rng.below(n - 1 - j)));
      c.next_.push_back(pool[j]);
    }
    double sum = 0;
    for (double& x : w) {
      double e = -std::log(rng.uniform_open());
      x = e * e;
      sum += x;
    }
    for (double x : w) c.prob_.push_back(x / sum);
  }
  c.offsets_[n] = static_cast<int64_t>(c.next_.size());
  // With one successor per state the chain is the cycle: pi is uniform.
  c.finish(/*uniform_stationary=*/branching == 1);
  return c;
}

MarkovChain MarkovChain::from_rows(const std::vector<std::vector<int32_t>>& next,
                                   const std::vector<std::vector<double>>& prob) {
  const int n = static_cast<int>(next.size());
  if (n < 1 || prob.size() != next.size()) {
    throw DataError("markov chain: need one successor list and one probability list per state");
  }
  MarkovChain c;
  c.offsets_.resize(n + 1);
  for (int i = 0; i < n; ++i) {
    const std::string state = "markov chain: state " + std::to_string(i) + ": ";
    if (next[i].empty()) throw DataError(state + "has no successors");
    if (next[i].size() != prob[i].size()) {
      throw DataError(state + "successor and probability lists differ in length");
    }
    std::vector<int32_t> sorted = next[i];
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      throw DataError(state + "repeated successor");
    }
    if (sorted.front() < 0 || sorted.back() >= n) {
      throw DataError(state + "successor out of range [0, " + std::to_string(n) + ")");
    }
    double sum = 0;
    for (double p : prob[i]) {
      if (!(p > 0)) throw DataError(state + "probabilities must be > 0");
      sum += p;
    }
    if (std::abs(sum - 1) > 1e-9) {
      throw DataError(state + "probabilities sum to " + std::to_string(sum) + ", not 1");
    }
    c.offsets_[i] = static_cast<int64_t>(c.next_.size());
    for (size_t k = 0; k < next[i].size(); ++k) {
      c.next_.push_back(next[i][k]);
      c.prob_.push_back(prob[i][k] / sum);
    }
  }
  c.offsets_[n] = static_cast<int64_t>(c.next_.size());
  c.finish(/*uniform_stationary=*/false);
  return c;
}

void MarkovChain::finish(bool uniform_stationary) {
  const int n = vocab();
  cum_.resize(prob_.size());
  for (int i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t k = offsets_[i]; k < offsets_[i + 1]; ++k) cum_[k] = (s += prob_[k]);
    cum_[offsets_[i + 1] - 1] = 1.0;  // rounding must never let u fall off the end
  }
  if (uniform_stationary) {
    pi_.assign(n, 1.0 / n);
  } else {
    compute_stationary();
  }
  pi_cum_.resize(n);
  double s = 0;
  for (int i = 0; i < n; ++i) pi_cum_[i] = (s += pi_[i]);
  // Like cum_, but zero-probability tail states (transient in a reducible
  // hand-built chain) must keep their cumulative value so they are never drawn.
  for (int i = n - 1; i >= 0 && pi_cum_[i] >= s; --i) pi_cum_[i] = 1.0;

  entropy_rate_ = 0;
  for (int i = 0; i < n; ++i) {
    double h = 0;
    for (int64_t k = offsets_[i]; k < offsets_[i + 1]; ++k) h -= prob_[k] * std::log(prob_[k]);
    entropy_rate_ += pi_[i] * h;
  }
}

void MarkovChain::compute_stationary() {
  // Power iteration on the lazy chain 0.1 I + 0.9 P: it has the same
  // stationary distribution as P but is aperiodic, so it converges even when
  // P is periodic (a hand-built 2-cycle). Converged once the L1 change of an
  // iteration is below 1e-15, a few ulps of a probability vector.
  const int n = vocab();
  std::vector<double> x(n, 1.0 / n), y(n);
  constexpr int kMaxIters = 200000;
  double diff = 1;
  for (int it = 0; it < kMaxIters && diff >= 1e-15; ++it) {
    for (int i = 0; i < n; ++i) y[i] = 0.1 * x[i];
    for (int i = 0; i < n; ++i) {
      const double xi = 0.9 * x[i];
      for (int64_t k = offsets_[i]; k < offsets_[i + 1]; ++k) y[next_[k]] += xi * prob_[k];
    }
    double sum = std::accumulate(y.begin(), y.end(), 0.0);
    diff = 0;
    for (int i = 0; i < n; ++i) {
      y[i] /= sum;
      diff += std::abs(y[i] - x[i]);
    }
    x.swap(y);
  }
  // Slower than 1e-15 but at rounding level (huge vocabularies): still exact
  // enough for an entropy printed to 4 digits.
  if (diff >= 1e-12) {
    throw DataError("markov chain: stationary distribution did not converge after " +
                    std::to_string(kMaxIters) + " iterations (L1 change " + std::to_string(diff) +
                    ")");
  }
  pi_ = std::move(x);
}

double MarkovChain::transition(int32_t from, int32_t to) const {
  for (int64_t k = offsets_[from]; k < offsets_[from + 1]; ++k) {
    if (next_[k] == to) return prob_[k];
  }
  return 0;
}

int32_t MarkovChain::sample_start(double u) const {
  auto it = std::upper_bound(pi_cum_.begin(), pi_cum_.end(), u);
  return static_cast<int32_t>(std::min<int64_t>(it - pi_cum_.begin(), vocab() - 1));
}

int32_t MarkovChain::sample_next(int32_t state, double u) const {
  const double* b = cum_.data() + offsets_[state];
  const double* e = cum_.data() + offsets_[state + 1];
  const double* it = std::min(std::upper_bound(b, e, u), e - 1);
  return next_[offsets_[state] + (it - b)];
}

namespace {

class MarkovSource final : public TokenSource {
 public:
  MarkovSource(MarkovChain chain, uint64_t seed, std::string name)
      : chain_(std::move(chain)), seed_(seed), name_(std::move(name)) {}

  void fill(Batch& batch, int B, int T, const BatchIndex& at) const override {
    shape_batch(batch, B, T);
    const int64_t row0 = first_sample_row(at, B);
    for (int b = 0; b < B; ++b) {
      SplitMix64 rng(hash_seed(seed_, kDomainMarkovRow, static_cast<uint64_t>(row0 + b)));
      int32_t* in = batch.inputs.data() + int64_t{b} * T;
      int32_t* tgt = batch.targets.data() + int64_t{b} * T;
      int32_t tok = chain_.sample_start(rng.uniform());
      for (int t = 0; t < T; ++t) {
        in[t] = tok;
        tok = chain_.sample_next(tok, rng.uniform());
        tgt[t] = tok;
      }
    }
  }

  int vocab_size() const override { return chain_.vocab(); }
  double entropy_floor() const override { return chain_.entropy_rate(); }

  std::string describe() const override {
    char floor[64];
    std::snprintf(floor, sizeof floor, ", entropy floor %.4f nats/token", chain_.entropy_rate());
    return name_ + floor;
  }

 private:
  MarkovChain chain_;
  uint64_t seed_;
  std::string name_;
};

}  // namespace

std::unique_ptr<TokenSource> make_markov_source(MarkovChain chain, uint64_t seed,
                                                std::string name) {
  return std::make_unique<MarkovSource>(std::move(chain), seed, std::move(name));
}

std::unique_ptr<TokenSource> make_markov_source(int vocab, int branching, uint64_t seed) {
  std::string name = "synthetic markov(vocab=" + std::to_string(vocab) +
                     ", branching=" + std::to_string(branching) + ", seed=" + std::to_string(seed) +
                     ")";
  return make_markov_source(MarkovChain::random(vocab, branching, seed), seed, std::move(name));
}

}  // namespace weft
