// ZeRO against plain data parallelism, in process: N Trainers on threads over
// a FakeGroup (tests/support/fake_communicator.h) train the same model on the
// same batches; every stage x overlap mode x parameter-gather overlap must
// reach DP's parameters (fp32, relative 1e-5) after 10+ steps, with clipping
// active, with gradient accumulation, across a live re-bucketing and with a
// bf16 wire. The multi-process runs in zero_multiprocess_test prove the same
// over real Gloo.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <mutex>
#include <vector>

#include "parallel/strategy_factory.h"
#include "parallel/zero.h"
#include "support/fake_communicator.h"
#include "support/run_process.h"
#include "train/trainer.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::FakeGroup;
using testing::run_ranks;

struct RunResult {
  std::vector<std::vector<float>> params;  // per rank, the flat parameters at the end
  std::vector<StateBytes> bytes;           // per rank
  std::vector<double> grad_norms;          // rank 0, per step
  std::vector<double> losses;              // rank 0
};

WorkerConfig base_config(const fs::path& out) {
  WorkerConfig c;
  c.model.vocab_size = 32;
  c.model.d_model = 32;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.max_seq_len = 16;
  c.train.seq_len = 16;
  c.train.micro_batch = 2;
  c.train.steps = 12;
  c.train.log_every = 0;
  c.train.out_dir = out.string();
  c.data.branching = 3;
  c.optim.warmup_steps = 3;
  c.checkpoint.resume = false;
  c.metrics.port = 0;
  c.parallel.bucket_cap_mb = 0.01;       // several buckets over the ~30k parameters
  c.parallel.first_bucket_mb = 0.002;
  return c;
}

// Records grad norms; optionally writes a new bucket cap into the tuner's
// file after a given step (rank 0 reads it at the next boundary).
class Recorder : public StepObserver {
 public:
  Recorder(std::vector<double>* norms, std::vector<double>* losses, std::string cap_file = {},
           int64_t after_step = 0, double cap = 0)
      : norms_(norms), losses_(losses), cap_file_(std::move(cap_file)), after_(after_step), cap_(cap) {}
  void on_step(const StepReport& r) override {
    if (norms_) norms_->push_back(r.grad_norm);
    if (losses_) losses_->push_back(r.loss);
    if (!cap_file_.empty() && r.step == after_) testing::write_file(cap_file_, std::to_string(cap_) + "\n");
  }
  void on_checkpoint(int64_t) override {}

 private:
  std::vector<double>* norms_;
  std::vector<double>* losses_;
  std::string cap_file_;
  int64_t after_;
  double cap_;
};

RunResult train(int n, WorkerConfig cfg, const std::string& cap_file = {}, int64_t cap_after = 0,
                double new_cap = 0) {
  auto group = FakeGroup::create(n, "dp", {{}, std::chrono::milliseconds(60000)});
  RunResult out;
  out.params.resize(n);
  out.bytes.resize(n);
  cfg.parallel.bucket_cap_file = cap_file;
  run_ranks(n, [&](int rank) {
    WorkerConfig c = cfg;
    c.train.out_dir = cfg.train.out_dir + "/rank" + std::to_string(rank);
    c.checkpoint.dir = cfg.train.out_dir + "/ckpt";  // shared, as on a job's volume
    Trainer t(c, TrainerComm{rank, n, group->member(rank), nullptr, nullptr, nullptr, nullptr});
    Recorder rec(rank == 0 ? &out.grad_norms : nullptr, rank == 0 ? &out.losses : nullptr,
                 rank == 0 ? cap_file : std::string(), cap_after, new_cap);
    t.set_observer(&rec);
    t.run();
    const Llama& m = t.model();
    for (size_t i = 0; i < m.params().size(); ++i) {
      Tensor p = m.param(static_cast<int>(i));
      out.params[rank].insert(out.params[rank].end(), p.f32(), p.f32() + p.numel());
    }
    out.bytes[rank] = t.grad_sync().report().memory;
  });
  return out;
}

// ||a - b|| / ||a|| over the whole parameter vector.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0, nrm = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    nrm += double(a[i]) * a[i];
  }
  return std::sqrt(d / std::max(nrm, 1e-30));
}

class ZeroVsDp : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::fresh_dir("zero"); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

struct Variant {
  const char* name;
  double grad_clip;
  int grad_accum;
};

TEST_F(ZeroVsDp, EveryStageOverlapAndGatherModeReachesDpParameters) {
  // "clip": the clip norm is below every step's norm (checked), so clipping
  // scales every update; "accum": 2 micro-batches, no clipping, so the
  // overlapped modes step shards before the last reduction completes.
  const Variant variants[] = {{"clip", 0.05, 1}, {"accum", 0.0, 2}};
  for (int n : {2, 3, 4}) {
    for (const Variant& v : variants) {
      WorkerConfig cfg = base_config(dir_ / "dp");
      cfg.optim.grad_clip = v.grad_clip;
      cfg.train.grad_accum = v.grad_accum;
      const RunResult dp = train(n, cfg);
      if (v.grad_clip > 0) {
        for (double norm : dp.grad_norms) ASSERT_GT(norm, v.grad_clip) << "clipping must be active";
      }
      for (int stage : {1, 2})
        for (ZeroOverlap overlap : {ZeroOverlap::None, ZeroOverlap::AfterBackward, ZeroOverlap::Interleaved})
          for (bool gather : {false, true}) {
            const std::string what = std::string(v.name) + " N=" + std::to_string(n) + " stage " +
                                     std::to_string(stage) + " " + std::string(contract::mode_name(overlap)) + (gather ? " +gather" : "");
            SCOPED_TRACE(what);
            WorkerConfig z = cfg;
            z.train.out_dir = (dir_ / "zero").string();
            z.parallel.strategy = Strategy::Zero;
            z.parallel.zero.stage = stage;
            z.parallel.zero.overlap = overlap;
            z.parallel.zero.overlap_param_gather = gather;
            const RunResult r = train(n, z);
            for (int rank = 0; rank < n; ++rank) {
              const double d = rel_diff(dp.params[0], r.params[rank]);
              EXPECT_LT(d, 1e-5) << "rank " << rank;
              if (rank == 0) std::printf("%-44s max rel diff vs DP %.2e\n", what.c_str(), d);
            }
            // Every rank holds the same full parameters after the gathers.
            for (int rank = 1; rank < n; ++rank) EXPECT_EQ(r.params[0], r.params[rank]) << "rank " << rank;
            // The grad norm is the unsharded one.
            ASSERT_EQ(r.grad_norms.size(), dp.grad_norms.size());
            for (size_t s = 0; s < r.grad_norms.size(); ++s)
              EXPECT_NEAR(r.grad_norms[s], dp.grad_norms[s], 1e-5 * dp.grad_norms[s]) << "step " << s + 1;
          }
    }
  }
}

TEST_F(ZeroVsDp, OptimizerStateAndStage2GradientsAreOneNthOfDp) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE("N=" + std::to_string(n));
    WorkerConfig cfg = base_config(dir_ / "dp");
    cfg.train.steps = 2;
    const RunResult dp = train(n, cfg);
    for (int stage : {1, 2}) {
      WorkerConfig z = cfg;
      z.parallel.strategy = Strategy::Zero;
      z.parallel.zero.stage = stage;
      const RunResult r = train(n, z);
      int64_t opt_total = 0, grad_total = 0;
      for (int rank = 0; rank < n; ++rank) {
        // Shards differ by at most the virtual padding: < n elements per bucket.
        const int64_t slack = int64_t(n) * 4 * 2 * 64;  // 2 moments, up to 64 buckets
        EXPECT_LE(r.bytes[rank].optimizer, dp.bytes[0].optimizer / n + slack) << "rank " << rank;
        EXPECT_GE(r.bytes[rank].optimizer, dp.bytes[0].optimizer / n - slack) << "rank " << rank;
        opt_total += r.bytes[rank].optimizer;
        grad_total += r.bytes[rank].grads;
        if (stage == 2) {
          EXPECT_LE(r.bytes[rank].grads, dp.bytes[0].grads / n + slack / 2) << "rank " << rank;
        } else {
          EXPECT_EQ(r.bytes[rank].grads, dp.bytes[0].grads);
        }
      }
      // The shards partition the state exactly.
      EXPECT_EQ(opt_total, dp.bytes[0].optimizer);
      if (stage == 2) {
        EXPECT_EQ(grad_total, dp.bytes[0].grads);
      }
      std::printf("N=%d stage %d: optimizer bytes rank 0 %lld (DP %lld, ratio %.3f), grad bytes %lld (DP %lld)\n",
                  n, stage, static_cast<long long>(r.bytes[0].optimizer),
                  static_cast<long long>(dp.bytes[0].optimizer),
                  double(r.bytes[0].optimizer) / dp.bytes[0].optimizer,
                  static_cast<long long>(r.bytes[0].grads), static_cast<long long>(dp.bytes[0].grads));
    }
  }
}

// The tuner's path: a new cap at step 5; the optimizer shards move with the
// buckets and the run still matches DP (which re-buckets nothing).
TEST_F(ZeroVsDp, LiveRebucketingMovesTheShards) {
  for (int n : {2, 3}) {
    WorkerConfig cfg = base_config(dir_ / "dp");
    const RunResult dp = train(n, cfg);
    for (int stage : {1, 2}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " stage " + std::to_string(stage));
      WorkerConfig z = cfg;
      z.parallel.strategy = Strategy::Zero;
      z.parallel.zero.stage = stage;
      z.parallel.zero.overlap_param_gather = true;
      const std::string cap_file = (dir_ / ("cap-" + std::to_string(n) + "-" + std::to_string(stage))).string();
      testing::write_file(cap_file, "0.01\n");
      const RunResult r = train(n, z, cap_file, 5, 0.003);
      for (int rank = 0; rank < n; ++rank) EXPECT_LT(rel_diff(dp.params[0], r.params[rank]), 1e-5);
      EXPECT_GT(r.bytes[0].optimizer, 0);
    }
  }
}

TEST_F(ZeroVsDp, Bf16WireMatchesDpWithBf16Wire) {
  WorkerConfig cfg = base_config(dir_ / "dp");
  cfg.parallel.bf16_wire = true;
  const RunResult dp = train(2, cfg);
  WorkerConfig fp32 = base_config(dir_ / "dp32");
  const RunResult dp32 = train(2, fp32);
  WorkerConfig z = cfg;
  z.parallel.strategy = Strategy::Zero;
  z.parallel.zero.stage = 1;
  const RunResult r = train(2, z);
  // Two ranks: a bf16 reduce-scatter rounds each element as the all-reduce does.
  EXPECT_LT(rel_diff(dp.params[0], r.params[0]), 1e-5);
  EXPECT_GT(rel_diff(dp32.params[0], r.params[0]), 0.0) << "bf16 rounding must show";
}

TEST(ZeroConfig, ZeroOnOneRankIsAConfigErrorNamingTheStrategy) {
  WorkerConfig c;
  c.parallel.strategy = Strategy::Zero;
  auto buffer = std::make_shared<ParamAndGradBuffer>(llama_param_table(c.model));
  try {
    make_grad_sync(c, buffer, nullptr);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.strategy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("world size is 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_config("parallel: {zero: {overlap: eager}}\n"), ConfigError);
}

}  // namespace
}  // namespace weft
