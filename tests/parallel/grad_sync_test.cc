// GradSync implementations and StepBoundary over in-process fake groups
// (tests/support/fake_communicator.h): fast checks of the protocol; the
// multi-process runs in dp_equivalence_test stay the proof on real Gloo.
#include "parallel/grad_sync.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "model/llama.h"
#include "parallel/data_parallel.h"
#include "parallel/isp.h"
#include "parallel/local_sync.h"
#include "parallel/step_boundary.h"
#include "parallel/strategy_factory.h"
#include "parallel/zero.h"
#include "support/fake_communicator.h"
#include "support/small_model.h"

namespace weft {
namespace {

using testing::FakeGroup;
using testing::run_ranks;
using testing::small_model;

OptimConfig optim() {
  OptimConfig o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  return o;
}

std::shared_ptr<ParamAndGradBuffer> make_buffer(float param_seed) {
  auto b = std::make_shared<ParamAndGradBuffer>(llama_param_table(small_model()));
  float* p = b->flat_params().f32();
  for (int64_t i = 0; i < b->numel(); ++i) p[i] = param_seed + 0.001f * static_cast<float>(i % 97);
  return b;
}

// Rank r's gradient for element i: distinct per rank, so the average matters.
float grad_of(int rank, int64_t i) {
  return 0.01f * static_cast<float>((i * (rank + 3)) % 41 - 20);
}

void fill_grads(ParamAndGradBuffer& b, int rank, float scale = 1.0f) {
  float* g = b.flat_grads().f32();
  for (int64_t i = 0; i < b.numel(); ++i) g[i] = scale * grad_of(rank, i);
}

// One micro-batch of "backward": every parameter reported in backward order.
double run_micro_batch(GradSync& sync, ParamAndGradBuffer& b, bool last, double loss) {
  sync.begin_micro_batch(last);
  for (int i = 0; i < static_cast<int>(b.params().size()); ++i) sync.on_grad_ready(i);
  return sync.finish_micro_batch(loss);
}

DataParallelOptions small_buckets(bool bf16 = false) {
  DataParallelOptions o;
  o.buckets.bucket_cap_mb = 0.004;  // a few KiB: several buckets over the ~13k parameters
  o.buckets.bf16_wire = bf16;
  return o;
}

TEST(GradSync, DataParallelEqualsOneRankStepOnTheAveragedGradients) {
  for (int n : {2, 3}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    // Reference: one rank with the ranks' mean gradient.
    auto ref = make_buffer(0.5f);
    {
      float* g = ref->flat_grads().f32();
      for (int64_t i = 0; i < ref->numel(); ++i) {
        float s = 0;
        for (int r = 0; r < n; ++r) s += grad_of(r, i);
        g[i] = s * (1.0f / n);
      }
    }
    LocalGradSync local(ref, optim());
    local.start();
    EXPECT_EQ(run_micro_batch(local, *ref, true, 1.25), 1.25);
    const double ref_norm = local.clip_and_step(1e-2, 0.5);

    auto group = FakeGroup::create(n, "dp");
    std::vector<std::shared_ptr<ParamAndGradBuffer>> bufs(n);
    std::vector<double> loss(n), norm(n);
    run_ranks(n, [&](int r) {
      bufs[r] = make_buffer(r == 0 ? 0.5f : 9.0f);  // start() makes rank 0's weights everyone's
      DataParallel dp(bufs[r], group->member(r), small_buckets(), optim());
      EXPECT_GT(dp.report().bucket_count, 2);
      dp.start();
      fill_grads(*bufs[r], r);
      loss[r] = run_micro_batch(dp, *bufs[r], true, 1.0 + r);
      norm[r] = dp.clip_and_step(1e-2, 0.5);
      EXPECT_GT((*dp.report().last_step).comm_seconds, 0.0);
      EXPECT_EQ((*dp.report().last_step).bucket_seconds.size(),
                static_cast<size_t>(dp.report().bucket_count));
      EXPECT_EQ(dp.state().writes_optimizer_state(), r == 0);
      EXPECT_EQ(dp.report().memory.optimizer, 2 * bufs[r]->numel() * 4);
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_NEAR(loss[r], 1.0 + (n - 1) / 2.0, 1e-6);
      EXPECT_NEAR(norm[r], ref_norm, 1e-5 * ref_norm);
      const float* p = bufs[r]->flat_params().f32();
      const float* want = ref->flat_params().f32();
      for (int64_t i = 0; i < ref->numel(); ++i)
        ASSERT_NEAR(p[i], want[i], 1e-6f) << "rank " << r << " elem " << i;
    }
  }
}

TEST(GradSync, NoSyncMicroBatchesAccumulateLocally) {
  auto group = FakeGroup::create(2, "dp");
  run_ranks(2, [&](int r) {
    auto b = make_buffer(0.5f);
    DataParallel dp(b, group->member(r), small_buckets(), optim());
    dp.start();
    fill_grads(*b, r);
    // Not the last micro-batch: nothing is reduced, the loss stays local.
    EXPECT_EQ(run_micro_batch(dp, *b, false, 3.0 + r), 3.0 + r);
    EXPECT_EQ(b->flat_grads().f32()[7], grad_of(r, 7));
    EXPECT_EQ(group->member(r)->stats().by_op.count("all_reduce"), 0u);
    run_micro_batch(dp, *b, true, 3.0 + r);
    EXPECT_NEAR(b->flat_grads().f32()[7], (grad_of(0, 7) + grad_of(1, 7)) / 2, 1e-7);
  });
}

TEST(GradSync, Bf16WireRoundsTheAverage) {
  auto group = FakeGroup::create(2, "dp");
  std::vector<std::vector<float>> got(2);
  run_ranks(2, [&](int r) {
    auto b = make_buffer(0.5f);
    DataParallel dp(b, group->member(r), small_buckets(/*bf16=*/true), optim());
    dp.start();
    fill_grads(*b, r);
    run_micro_batch(dp, *b, true, 0);
    got[r].assign(b->flat_grads().f32(), b->flat_grads().f32() + b->numel());
  });
  EXPECT_EQ(got[0], got[1]);
  for (size_t i = 0; i < got[0].size(); ++i) {
    // Each rank's gradient and the sum are rounded to bf16 (2^-9 relative
    // each), so the error scales with the inputs, not with their average.
    const float a = grad_of(0, i), b = grad_of(1, i), want = (a + b) / 2;
    ASSERT_NEAR(got[0][i], want, 1e-2f * (std::fabs(a) + std::fabs(b)) / 2 + 1e-6f) << i;
  }
}

// A cap agreed at a step boundary re-plans the buckets: the report and the
// next step's accounting have the new count.
TEST(GradSync, RebucketApplies) {
  auto group = FakeGroup::create(2, "dp");
  run_ranks(2, [&](int r) {
    auto b = make_buffer(0.5f);
    DataParallel dp(b, group->member(r), small_buckets(), optim());
    dp.start();
    run_micro_batch(dp, *b, true, 0);
    const int before = dp.report().bucket_count;
    EXPECT_GT(before, 1);
    EXPECT_EQ(dp.report().last_step->bucket_seconds.size(), static_cast<size_t>(before));
    dp.rebucket(1000, 4);  // one bucket holds everything
    EXPECT_EQ(dp.report().bucket_count, 1);
    EXPECT_EQ(dp.report().bucket_cap_mb, 1000);
    run_micro_batch(dp, *b, true, 0);
    EXPECT_EQ(dp.report().last_step->bucket_seconds.size(), 1u);
  });
}

TEST(GradSync, AutoBucketCapIsTheSameOnEveryRankOfTheGroup) {
  // parallel.bucket_cap_mb: auto resolves from what every rank holds alike:
  // no rank may plan other buckets (their collectives would not match).
  for (int n : {2, 3}) {
    auto group = FakeGroup::create(n, "dp");
    std::vector<double> cap(n), first_bucket(n);
    std::vector<int> count(n);
    run_ranks(n, [&](int r) {
      auto b = make_buffer(r == 0 ? 0.5f : 9.0f);
      DataParallelOptions o;  // bucket_cap_mb 0: auto
      DataParallel dp(b, group->member(r), o, optim());
      cap[r] = dp.report().bucket_cap_mb;
      count[r] = dp.report().bucket_count;
      first_bucket[r] = dp.buckets()[0].numel();
      EXPECT_NE(dp.described().description.find("auto"), std::string::npos) << dp.described().description;
      dp.start();
      fill_grads(*b, r);
      run_micro_batch(dp, *b, true, 0);  // the collectives match up
      ZeroGradSync zero(make_buffer(0.5f), group->member(r), ZeroOptions{}, optim());
      EXPECT_EQ(zero.report().bucket_cap_mb, cap[r]);
      EXPECT_NE(zero.described().description.find("auto"), std::string::npos)
          << zero.described().description;
    });
    const BucketSizing want = auto_bucket_sizing(make_buffer(0)->numel() * 4, n);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(cap[r], want.cap_mb) << "rank " << r;
      EXPECT_EQ(count[r], count[0]);
      EXPECT_EQ(first_bucket[r], first_bucket[0]);
    }
  }
}

// bf16 working weights: the f32 master copy comes from load_full_weights
// alone, exactly (start() leaves it alone), and a checkpoint's optimizer
// state loads before or after the weights with the same result.
TEST(GradSync, Bf16MasterComesFromTheFullWeightsInEitherLoadOrder) {
  auto full = make_buffer(0.5f);  // f32 values bf16 cannot hold exactly
  AdamW saved(optim(), default_param_ranges(full->params(), optim()));
  fill_grads(*full, 0);
  saved.step(make_buffer(2.0f)->flat_params(), full->flat_grads(),
             1e-2);  // moments and a step count
  auto gathered = [&](bool state_first) {
    auto b = std::make_shared<ParamAndGradBuffer>(llama_param_table(small_model()), DType::BF16);
    LocalGradSync local(b, optim());
    if (state_first) local.state().optimizer().load_state(saved);
    local.state().load_full_weights(*full);
    if (!state_first) local.state().optimizer().load_state(saved);
    local.start();
    EXPECT_EQ(local.state().optimizer().step_count(), 1);
    ParamAndGradBuffer out(llama_param_table(small_model()));
    local.state().gather_full_weights(out);
    std::vector<float> w(out.flat_params().f32(), out.flat_params().f32() + out.numel());
    // One step: the moments and the master both take part.
    fill_grads(*b, 1);
    run_micro_batch(local, *b, true, 0);
    local.clip_and_step(1e-2, 0);
    local.state().gather_full_weights(out);
    w.insert(w.end(), out.flat_params().f32(), out.flat_params().f32() + out.numel());
    return w;
  };
  const std::vector<float> a = gathered(true), b = gathered(false);
  const std::vector<float> want(full->flat_params().f32(),
                                full->flat_params().f32() + full->numel());
  ASSERT_EQ(std::vector<float>(a.begin(), a.begin() + full->numel()), want)
      << "master != the loaded f32 weights";
  EXPECT_EQ(a, b);
}

// ZeRO moves the master copy with the buckets when re-bucketing: the full
// f32 weights gathered before and after are the same, and the next step runs
// (a master copy the new layout never loaded would abort it).
TEST(GradSync, ZeroRebucketKeepsTheBf16MasterCopy) {
  auto group = FakeGroup::create(2, "dp");
  auto full = make_buffer(0.5f);
  run_ranks(2, [&](int r) {
    auto b = std::make_shared<ParamAndGradBuffer>(llama_param_table(small_model()), DType::BF16);
    ZeroOptions o;
    o.buckets.bucket_cap_mb = 0.004;
    ZeroGradSync zero(b, group->member(r), o, optim());
    zero.state().load_full_weights(*full);
    zero.start();
    zero.prepare_step(1e-2, 0);
    fill_grads(*b, r);
    run_micro_batch(zero, *b, true, 0);
    zero.clip_and_step(1e-2, 0);
    ParamAndGradBuffer before(llama_param_table(small_model())),
        after(llama_param_table(small_model()));
    zero.state().gather_full_weights(before);
    const int buckets = zero.report().bucket_count;
    zero.rebucket(0.002, 1);
    EXPECT_NE(zero.report().bucket_count, buckets);
    zero.state().gather_full_weights(after);
    for (int64_t i = 0; i < full->numel(); ++i)
      ASSERT_EQ(before.flat_params().f32()[i], after.flat_params().f32()[i])
          << "rank " << r << " elem " << i;
    zero.prepare_step(1e-2, 0);
    fill_grads(*b, r);
    run_micro_batch(zero, *b, true, 0);
    zero.clip_and_step(1e-2, 0);
    EXPECT_EQ(zero.state().optimizer().step_count(), 2);
  });
}

TEST(StepBoundary, OneRanksStopStopsAllAndRankZerosCapWins) {
  namespace fs = std::filesystem;
  const fs::path cap = fs::temp_directory_path() / ("weft-cap-" + std::to_string(::getpid()));
  fs::remove(cap);
  auto group = FakeGroup::create(3, "dp");
  std::vector<std::vector<StepAgreement>> seen(3);
  std::atomic<int> at_boundary{0};
  run_ranks(3, [&](int r) {
    StepBoundary sb(group->member(r), cap.string());
    seen[r].push_back(sb.agree(false, 25));  // no file yet: nothing changes
    if (r == 0) {
      std::ofstream(cap) << "4\n";
    }
    seen[r].push_back(sb.agree(r == 2, 25));  // rank 2 stops; rank 0 reads 4 MiB
    seen[r].push_back(sb.agree(false, 4));    // unchanged file: no new cap
    ++at_boundary;
  });
  EXPECT_EQ(at_boundary.load(), 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(seen[r][0].stop);
    EXPECT_EQ(seen[r][0].new_cap_mb, 0);
    EXPECT_TRUE(seen[r][1].stop);
    EXPECT_EQ(seen[r][1].new_cap_mb, 4);
    EXPECT_FALSE(seen[r][2].stop);
    EXPECT_EQ(seen[r][2].new_cap_mb, 0);
  }
  fs::remove(cap);
  // Alone: no group, no collective, the local stop request decides.
  StepBoundary alone(nullptr, cap.string());
  EXPECT_TRUE(alone.agree(true, 25).stop);
  EXPECT_FALSE(alone.agree(false, 25).stop);
}

TEST(GradSync, FactoryPicksByGroupSizeAndRejectsUnbuiltStrategies) {
  WorkerConfig cfg;
  cfg.model = small_model();
  EXPECT_NE(dynamic_cast<LocalGradSync*>(make_grad_sync(cfg, make_buffer(0), nullptr).get()),
            nullptr);
  auto one = FakeGroup::create(1, "dp");
  EXPECT_NE(dynamic_cast<LocalGradSync*>(make_grad_sync(cfg, make_buffer(0), one->member(0)).get()),
            nullptr);
  auto two = FakeGroup::create(2, "dp");
  EXPECT_NE(dynamic_cast<DataParallel*>(make_grad_sync(cfg, make_buffer(0), two->member(0)).get()),
            nullptr);
  // ISP provides the model's weights: its buffer holds no storage.
  cfg.parallel.strategy = Strategy::Isp;
  auto provided = std::make_shared<ParamAndGradBuffer>(llama_param_table(cfg.model), DType::F32,
                                                       Device::CPU, model_storage(cfg.parallel));
  EXPECT_NE(dynamic_cast<IspGradSync*>(make_grad_sync(cfg, provided, nullptr).get()), nullptr);
  cfg.parallel.wp = 2;  // the config asks for groups the caller did not pass
  EXPECT_THROW(make_grad_sync(cfg, provided, nullptr), ConfigError);
  cfg.parallel.strategy = Strategy::Zero;  // sp/wp above 1 belong to isp
  EXPECT_THROW(make_grad_sync(cfg, make_buffer(0), nullptr), ConfigError);
}

// A finished collective with given queueing and run times.
class DoneWork : public comm::Work {
 public:
  DoneWork(double queued, double ran) : queued_(queued), ran_(ran) {}
  void wait() override {}
  bool completed() override { return true; }
  double comm_seconds() override { return ran_; }
  double enqueue_to_start_seconds() override { return queued_; }

 private:
  double queued_, ran_;
};

// comm time is the union of the collectives' spans: two buckets reduced at
// once on two lanes count once, so the overlap ratio does not credit comm
// hidden behind other comm.
TEST(CommSpans, ConcurrentCollectivesCountOnce) {
  using namespace std::chrono;
  const auto t0 = CommSpans::Clock::now();
  CommSpans s;
  DoneWork a(0.0, 0.100), b(0.0, 0.100), c(0.050, 0.100), d(0.0, 0.010);
  s.add(t0, a);  // [0, 100) ms
  s.add(t0, b);  // [0, 100): the same span on another lane
  EXPECT_NEAR(s.busy_seconds(), 0.100, 1e-9);
  s.add(t0 + milliseconds(20), c);  // [70, 170): overlaps the first
  EXPECT_NEAR(s.busy_seconds(), 0.170, 1e-9);
  s.add(t0 + milliseconds(300), d);  // [300, 310): a separate span
  EXPECT_NEAR(s.busy_seconds(), 0.180, 1e-9);
  s.clear();
  EXPECT_EQ(s.busy_seconds(), 0);
}

// A wrapping strategy (ISP) merges its inner strategy's spans into its own:
// the union is taken across both recorders, whatever their epochs.
TEST(CommSpans, MergedRecordersCountOverlapOnce) {
  using namespace std::chrono;
  CommSpans inner;
  std::this_thread::sleep_for(milliseconds(5));  // another epoch than `outer`
  CommSpans outer;
  const auto t0 = CommSpans::Clock::now();
  DoneWork bucket(0.0, 0.100), gather(0.0, 0.100), late(0.0, 0.010);
  inner.add(t0, bucket);                     // [0, 100) ms
  outer.add(t0 + milliseconds(50), gather);  // [50, 150): half under the bucket
  outer.add(t0 + milliseconds(400), late);   // [400, 410)
  outer.add(inner);
  EXPECT_NEAR(outer.busy_seconds(), 0.160, 1e-6);  // not 0.210, the sum of both recorders
  EXPECT_NEAR(inner.busy_seconds(), 0.100, 1e-9);  // the source is left as it was
}

}  // namespace
}  // namespace weft
