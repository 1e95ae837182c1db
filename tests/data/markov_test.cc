// Synthetic Markov source: entropy against closed forms, sampling against the
// chain, and the sample-order contract (determinism, rank/world partition).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>

#include "data/data_test_util.h"
#include "data/markov.h"
#include "data/sample_order.h"
#include "data/source.h"

namespace weft {
namespace {

double h2(double p) { return -p * std::log(p) - (1 - p) * std::log(1 - p); }

using testing_util::expect_rank_partition;

std::string error_of(const std::function<void()>& fn) { return testing_util::data_error_of(fn); }

TEST(MarkovChain, TwoStateEntropyMatchesClosedForm) {
  // P = [[1-a, a], [b, 1-b]]: pi = (b, a) / (a + b), H = pi0 h(a) + pi1 h(b).
  for (auto [a, b] : {std::pair{0.3, 0.6}, {0.01, 0.5}, {0.9, 0.2}}) {
    MarkovChain c = MarkovChain::from_rows({{0, 1}, {0, 1}}, {{1 - a, a}, {b, 1 - b}});
    double pi0 = b / (a + b), pi1 = a / (a + b);
    EXPECT_NEAR(c.stationary()[0], pi0, 1e-13);
    EXPECT_NEAR(c.stationary()[1], pi1, 1e-13);
    EXPECT_NEAR(c.entropy_rate(), pi0 * h2(a) + pi1 * h2(b), 1e-13) << a << " " << b;
  }
}

TEST(MarkovChain, PeriodicChainStillConverges) {
  // 0 -> 1 -> 0: period 2, plain power iteration would oscillate forever.
  MarkovChain c = MarkovChain::from_rows({{1}, {0}}, {{1.0}, {1.0}});
  EXPECT_NEAR(c.stationary()[0], 0.5, 1e-15);
  EXPECT_EQ(c.entropy_rate(), 0);
}

TEST(MarkovChain, DoublyStochasticHasUniformStationary) {
  // Every column sums to 1 too, so pi is uniform; every row has entropy h(1/4).
  MarkovChain c = MarkovChain::from_rows({{1, 2}, {0, 2}, {0, 1}},
                                         {{0.25, 0.75}, {0.75, 0.25}, {0.25, 0.75}});
  for (double p : c.stationary()) EXPECT_NEAR(p, 1.0 / 3, 1e-14);
  EXPECT_NEAR(c.entropy_rate(), h2(0.25), 1e-14);
}

TEST(MarkovChain, RandomChainInvariants) {
  for (auto [vocab, branching] : {std::pair{256, 4}, {64, 1}, {50, 50}, {1000, 3}}) {
    MarkovChain c = MarkovChain::random(vocab, branching, 7);
    ASSERT_EQ(c.vocab(), vocab);
    const auto& pi = c.stationary();
    std::vector<double> pi_p(vocab, 0.0);
    for (int i = 0; i < vocab; ++i) {
      int successors = 0;
      double row = 0;
      for (int j = 0; j < vocab; ++j) {
        double p = c.transition(i, j);
        successors += p > 0;
        row += p;
        pi_p[j] += pi[i] * p;
      }
      ASSERT_EQ(successors, branching) << "state " << i;
      ASSERT_NEAR(row, 1.0, 1e-12);
    }
    double sum = 0;
    for (int j = 0; j < vocab; ++j) {
      EXPECT_NEAR(pi_p[j], pi[j], 1e-14) << "pi P != pi at " << j;
      EXPECT_GT(pi[j], 0) << "irreducible chain: every token occurs";
      sum += pi[j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-13);
    EXPECT_GE(c.entropy_rate(), 0);
    EXPECT_LE(c.entropy_rate(), std::log(branching) + 1e-12);
  }
}

TEST(MarkovChain, SeedDecidesTheChain) {
  MarkovChain a = MarkovChain::random(128, 4, 1), b = MarkovChain::random(128, 4, 1);
  MarkovChain c = MarkovChain::random(128, 4, 2);
  EXPECT_EQ(a.entropy_rate(), b.entropy_rate());
  EXPECT_EQ(a.stationary(), b.stationary());
  EXPECT_NE(a.entropy_rate(), c.entropy_rate());
}

TEST(MarkovChain, RejectsImpossibleChains) {
  EXPECT_NE(error_of([] { MarkovChain::random(1, 1, 0); }).find("vocab must be >= 2, got 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { MarkovChain::random(8, 9, 0); }).find("branching must be in [1, vocab=8], got 9"),
            std::string::npos);
  EXPECT_NE(error_of([] { MarkovChain::random(8, 0, 0); }).find("got 0"), std::string::npos);
  EXPECT_NE(error_of([] { MarkovChain::random(1 << 20, 1 << 10, 0); }).find("exceed the limit"),
            std::string::npos);
  EXPECT_NE(error_of([] { MarkovChain::from_rows({{0, 0}}, {{0.5, 0.5}}); }).find("state 0: repeated successor"),
            std::string::npos);
  EXPECT_NE(error_of([] { MarkovChain::from_rows({{1}, {2}}, {{1.0}, {1.0}}); })
                .find("state 1: successor out of range [0, 2)"),
            std::string::npos);
  EXPECT_NE(error_of([] { MarkovChain::from_rows({{0, 1}, {0}}, {{0.5, 0.6}, {1.0}}); })
                .find("state 0: probabilities sum to 1.1"),
            std::string::npos);
  EXPECT_NE(error_of([] { MarkovChain::from_rows({{0}, {}}, {{1.0}, {}}); }).find("state 1: has no successors"),
            std::string::npos);
}

TEST(MarkovSource, SamplesFollowTheChain) {
  const int V = 16;
  auto source = make_markov_source(V, 4, 99);
  MarkovChain chain = MarkovChain::random(V, 4, 99);  // the source's chain
  std::vector<std::vector<int64_t>> counts(V, std::vector<int64_t>(V, 0));
  std::vector<int64_t> first(V, 0), all(V, 0);
  Batch batch;
  const int B = 64, T = 128, steps = 20;
  double nll = 0;
  for (int step = 0; step < steps; ++step) {
    source->fill(batch, B, T, BatchIndex{step, 0, 1, 0, 1});
    for (int b = 0; b < B; ++b) {
      first[batch.inputs[b * T]]++;
      for (int t = 0; t < T; ++t) {
        int32_t from = batch.inputs[b * T + t], to = batch.targets[b * T + t];
        if (t + 1 < T) {
          ASSERT_EQ(batch.inputs[b * T + t + 1], to) << "targets are the next inputs";
        }
        ASSERT_GT(chain.transition(from, to), 0) << from << " -> " << to << " is not in the chain";
        counts[from][to]++;
        all[from]++;
        nll -= std::log(chain.transition(from, to));
      }
    }
  }
  const double n_pairs = double(steps) * B * T, n_rows = double(steps) * B;
  for (int i = 0; i < V; ++i) {
    const double p_i = chain.stationary()[i];
    // 6 sigma of a binomial; rows are short Markov runs, so widen by 3x for
    // the correlation between neighbouring tokens of a row.
    EXPECT_NEAR(first[i] / n_rows, p_i, 6 * std::sqrt(p_i * (1 - p_i) / n_rows) + 1e-4) << i;
    EXPECT_NEAR(all[i] / n_pairs, p_i, 18 * std::sqrt(p_i * (1 - p_i) / n_pairs)) << i;
    for (int j = 0; j < V; ++j) {
      double p = chain.transition(i, j), f = double(counts[i][j]) / double(all[i]);
      EXPECT_NEAR(f, p, 6 * std::sqrt(p * (1 - p) / all[i]) + 1e-9) << i << " -> " << j;
    }
  }
  // The loss of the true model on these samples is the entropy floor.
  EXPECT_NEAR(nll / n_pairs, source->entropy_floor(), 0.02 * source->entropy_floor());
}

TEST(MarkovSource, DeterministicPerSeed) {
  auto a = make_markov_source(256, 4, 1234), b = make_markov_source(256, 4, 1234);
  auto c = make_markov_source(256, 4, 1235);
  Batch x, y, z;
  BatchIndex at{17, 1, 2, 3, 4};
  a->fill(x, 8, 32, at);
  b->fill(y, 8, 32, at);
  c->fill(z, 8, 32, at);
  EXPECT_EQ(x.inputs, y.inputs);
  EXPECT_EQ(x.targets, y.targets);
  EXPECT_NE(x.inputs, z.inputs);
  a->fill(y, 8, 32, BatchIndex{18, 1, 2, 3, 4});
  EXPECT_NE(x.inputs, y.inputs) << "the next step must see new rows";
  a->fill(y, 8, 32, at);
  EXPECT_EQ(x.inputs, y.inputs) << "reading other batches first must not change a batch";
}

TEST(MarkovSource, RanksPartitionTheGlobalBatch) {
  auto source = make_markov_source(256, 4, 1234);
  expect_rank_partition(*source, 16);
}

TEST(MarkovSource, DescribeAndConfig) {
  auto source = make_markov_source(256, 4, 1234);
  char expected[160];
  std::snprintf(expected, sizeof expected,
                "synthetic markov(vocab=256, branching=4, seed=1234), entropy floor %.4f nats/token",
                source->entropy_floor());
  EXPECT_EQ(source->describe(), expected);
  EXPECT_EQ(source->vocab_size(), 256);

  WorkerConfig cfg;
  cfg.model.vocab_size = 300;
  cfg.data.branching = 3;
  cfg.data.seed = 5;
  auto from_cfg = make_source(cfg);
  EXPECT_EQ(from_cfg->vocab_size(), 300);
  EXPECT_EQ(from_cfg->entropy_floor(), MarkovChain::random(300, 3, 5).entropy_rate());
}

TEST(MarkovSource, RejectsBadBatchIndex) {
  auto source = make_markov_source(16, 2, 1);
  Batch batch;
  EXPECT_NE(error_of([&] { source->fill(batch, 2, 4, BatchIndex{0, 0, 1, 4, 4}); })
                .find("batch index out of range: step 0, micro 0 of grad_accum 1, rank 4 of world 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] { source->fill(batch, 2, 4, BatchIndex{0, 2, 2, 0, 1}); }).find("micro 2 of grad_accum 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { source->fill(batch, 0, 4, BatchIndex{}); }).find("B=0 T=4"), std::string::npos);
  EXPECT_THROW(source->fill(batch, 2, 4, BatchIndex{-1, 0, 1, 0, 1}), DataError);
}

TEST(SampleOrder, FirstRowFormula) {
  EXPECT_EQ(first_sample_row(BatchIndex{0, 0, 1, 0, 1}, 8), 0);
  // ((step*accum + micro) * world + rank) * B
  EXPECT_EQ(first_sample_row(BatchIndex{3, 1, 2, 2, 4}, 5), ((3 * 2 + 1) * 4 + 2) * 5);
}

}  // namespace
}  // namespace weft
