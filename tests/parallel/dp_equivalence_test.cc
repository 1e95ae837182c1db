// Data parallelism changes how the work is split, not the result: N ranks
// with micro-batch b must reach the parameters of one rank with batch N*b,
// for any bucket cap, with or without overlap and gradient accumulation.
// Real processes through weft-run (Gloo over loopback).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/checkpoint_weights.h"
#include "support/run_process.h"
#include "train/safetensors.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::bin;
using testing::final_weights;
using testing::max_rel_diff;
using testing::fresh_dir;
using testing::run_process;
using testing::write_file;

class DataParallelEquivalence : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fresh_dir("dp"); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Trains `steps` steps with `ranks` processes; returns the run directory.
  fs::path train(const std::string& name, int ranks, int micro_batch, int grad_accum,
                 const std::string& parallel, int steps = 4) {
    fs::path out = dir_ / name;
    std::string cfg = write_file(
        dir_ / (name + ".yaml"),
        "preset: tiny\n"
        "model: {vocab_size: 32, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, max_seq_len: 16}\n"
        "train: {seq_len: 16, steps: " + std::to_string(steps) + ", log_every: 1, micro_batch: " +
            std::to_string(micro_batch) + ", grad_accum: " + std::to_string(grad_accum) + "}\n"
        "data: {branching: 3}\n"
        "checkpoint: {resume: false}\n"
        "metrics: {port: 0}\n"
        "parallel: " + parallel + "\n");
    std::vector<std::string> argv =
        ranks == 1 ? std::vector<std::string>{bin("weft-worker"), cfg, "--out", out.string()}
                   : std::vector<std::string>{bin("weft-run"), "-n", std::to_string(ranks), cfg,
                                              "--out", out.string()};
    auto r = run_process(argv, {"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"}, 0, {},
                         std::chrono::seconds(300));
    EXPECT_EQ(r.code, 0) << r.output;
    last_output_ = r.output;
    return out;
  }


  static bool identical(const SafetensorsFile& a, const SafetensorsFile& b) {
    for (const auto& [name, va] : a.tensors()) {
      const auto& vb = b.get(name, DType::F32, va.bytes / 4);
      if (std::memcmp(va.data, vb.data, va.bytes) != 0) return false;
    }
    return true;
  }

  fs::path dir_;
  std::string last_output_;
};

TEST_F(DataParallelEquivalence, NRanksMatchOneRankWithNTimesTheBatch) {
  for (int n : {2, 3, 4}) {
    auto one = final_weights(train("one-" + std::to_string(n), 1, 2 * n, 1, "{}"));
    auto many = final_weights(train("dp-" + std::to_string(n), n, 2, 1, "{bucket_cap_mb: 0.01}"));
    double d = max_rel_diff(one, many);
    EXPECT_LT(d, 1e-5) << n << " ranks";
    EXPECT_GT(d, 0.0) << "suspicious: different reduction orders should differ in the last bits";
    std::printf("N=%d: max relative parameter difference %.2e\n", n, d);
  }
}

TEST_F(DataParallelEquivalence, BucketCapDoesNotChangeTheResult) {
  auto per_param = final_weights(train("cap-tiny", 2, 2, 1, "{bucket_cap_mb: 1.0e-9}"));
  auto middle = final_weights(train("cap-mid", 2, 2, 1, "{bucket_cap_mb: 0.01, first_bucket_mb: 0.002}"));
  auto one = final_weights(train("cap-all", 2, 2, 1, "{bucket_cap_mb: 25}"));
  auto no_overlap = final_weights(train("no-overlap", 2, 2, 1, "{bucket_cap_mb: 0.01, overlap: false}"));
  auto automatic = final_weights(train("cap-auto", 2, 2, 1, "{bucket_cap_mb: auto}"));
  // Two ranks: every element is a + b then / 2 whatever the chunking: bitwise.
  EXPECT_TRUE(identical(per_param, middle));
  EXPECT_TRUE(identical(per_param, automatic));
  EXPECT_TRUE(identical(per_param, one));
  EXPECT_TRUE(identical(per_param, no_overlap));
  auto three_a = final_weights(train("cap3-tiny", 3, 2, 1, "{bucket_cap_mb: 1.0e-9}"));
  auto three_b = final_weights(train("cap3-all", 3, 2, 1, "{bucket_cap_mb: 25}"));
  EXPECT_LT(max_rel_diff(three_a, three_b), 1e-6);
}

TEST_F(DataParallelEquivalence, GradientAccumulationMatchesLargerBatch) {
  auto accum = final_weights(train("accum", 2, 2, 2, "{bucket_cap_mb: 0.01}"));
  auto big = final_weights(train("big", 2, 4, 1, "{bucket_cap_mb: 0.01}"));
  auto single = final_weights(train("single", 1, 8, 1, "{}"));
  EXPECT_LT(max_rel_diff(big, accum), 1e-5);
  EXPECT_LT(max_rel_diff(single, accum), 1e-5);
}

TEST_F(DataParallelEquivalence, Bf16WireStaysClose) {
  auto fp32 = final_weights(train("wire32", 2, 2, 1, "{bucket_cap_mb: 0.01}"));
  auto bf16 = final_weights(train("wire16", 2, 2, 1, "{bucket_cap_mb: 0.01, bf16_wire: true}"));
  double d = max_rel_diff(fp32, bf16);
  EXPECT_GT(d, 0.0) << "bf16 rounding must show";
  EXPECT_LT(d, 2e-2);
}

// The tuner's path: rank 0 reads a new cap from a file; every rank switches
// at the same step boundary and the result does not change.
TEST_F(DataParallelEquivalence, RebucketingAppliesAtTheSameStepOnEveryRank) {
  std::string cap_file = write_file(dir_ / "bucket_cap_mb", "1.0e-9\n");
  auto switched = train("rebucket", 2, 2, 1, "{bucket_cap_mb: 25, bucket_cap_file: '" + cap_file + "'}");
  const std::string out = last_output_;
  for (const char* rank : {"[rank 0]", "[rank 1]"}) {
    bool found = false;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind(rank, 0) == 0 && line.find("step 1: bucket cap now 1e-09 MiB, 21 buckets") != std::string::npos)
        found = true;
    EXPECT_TRUE(found) << rank << " did not switch at step 1:\n" << out;
  }
  std::ifstream in(switched / "summary.json");
  auto s = nlohmann::json::parse(in);
  EXPECT_EQ(s["gradient_sync"]["bucket_count"].get<int>(), 21);
  auto reference = final_weights(train("rebucket-ref", 2, 2, 1, "{bucket_cap_mb: 25}"));
  EXPECT_TRUE(identical(final_weights(switched), reference));
}

}  // namespace
}  // namespace weft
