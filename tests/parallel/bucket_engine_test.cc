// BucketEngine over in-process fake groups (tests/support/fake_communicator.h):
// readiness, launch order, re-planning and the collective it issues.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "model/llama.h"
#include "parallel/bucket_engine.h"
#include "support/fake_communicator.h"
#include "support/small_model.h"

namespace weft {
namespace {

using testing::FakeGroup;
using testing::run_ranks;
using testing::small_model;

// Rank r's gradient for element i; the two ranks' values differ.
float grad_of(int rank, int64_t i) { return 0.25f * static_cast<float>((i * (rank + 3)) % 17 - 8); }

std::shared_ptr<ParamAndGradBuffer> make_buffer(int rank) {
  auto b = std::make_shared<ParamAndGradBuffer>(llama_param_table(small_model()));
  float* g = b->flat_grads().f32();
  for (int64_t i = 0; i < b->numel(); ++i) g[i] = grad_of(rank, i);
  return b;
}

BucketEngineOptions small_buckets(bool bf16 = false) {
  BucketEngineOptions o;
  o.bucket_cap_mb = 0.004;  // a few KiB: several buckets over the ~13k parameters
  o.bf16_wire = bf16;
  return o;
}

void mark_bucket(BucketEngine& e, int b) {
  const Bucket& k = e.buckets()[b];
  for (int p = k.first_param; p <= k.last_param; ++p) e.mark_ready(p);
}

void wait_all(BucketEngine& e, StepCommStats& stats) {
  stats.bucket_seconds.assign(e.size(), 0);
  for (int b = 0; b < e.size(); ++b) {
    e.wait(b);
    e.account(b, stats);
  }
}

// One micro-batch in which every parameter is ready in layout order.
void reduce_all(BucketEngine& e, const ParamAndGradBuffer& buf) {
  e.begin();
  for (int p = 0; p < static_cast<int>(buf.params().size()); ++p) e.mark_ready(p);
  e.launch_ready_in_order();
  EXPECT_EQ(e.launched(), e.size());
  StepCommStats stats;
  wait_all(e, stats);
}

TEST(BucketEngine, ABucketThatFillsEarlyWaitsForItsPredecessors) {
  auto group = FakeGroup::create(2, "dp");
  run_ranks(2, [&](int r) {
    auto buf = make_buffer(r);
    BucketEngine e(buf, group->member(r), BucketCollective::AllReduceAvg, small_buckets());
    ASSERT_GE(e.size(), 3);
    e.begin();
    // Buckets 2 and 1 are complete before bucket 0: nothing may launch yet.
    mark_bucket(e, 2);
    e.launch_ready_in_order();
    EXPECT_EQ(e.launched(), 0);
    mark_bucket(e, 1);
    e.launch_ready_in_order();
    EXPECT_EQ(e.launched(), 0);
    // Bucket 0 completes: 0, 1 and 2 launch in that order, 3 stays pending.
    const Bucket& b0 = e.buckets()[0];
    for (int p = b0.first_param; p < b0.last_param; ++p) e.mark_ready(p);
    e.launch_ready_in_order();
    EXPECT_EQ(e.launched(), 0) << "bucket 0 still has a parameter pending";
    e.mark_ready(b0.last_param);
    e.launch_ready_in_order();
    EXPECT_EQ(e.launched(), 3);
    for (int b = 3; b < e.size(); ++b) mark_bucket(e, b);
    e.launch_ready_in_order();
    EXPECT_EQ(e.launched(), e.size());
    e.check_all_ready();
    StepCommStats stats;
    wait_all(e, stats);
    EXPECT_EQ(stats.bucket_seconds.size(), static_cast<size_t>(e.size()));
  });
}

TEST(BucketEngine, AParameterReportedTwiceOrNeverIsRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto group = FakeGroup::create(1, "dp");
  auto buf = make_buffer(0);
  BucketEngine e(buf, group->member(0), BucketCollective::AllReduceAvg, small_buckets());
  e.begin();
  EXPECT_DEATH(e.check_all_ready(), "never reported");
  // Readiness is counted per bucket: a report beyond the bucket's parameters.
  mark_bucket(e, 0);
  EXPECT_DEATH(e.mark_ready(e.buckets()[0].first_param), "reported ready twice");
}

TEST(BucketEngine, AllReduceAveragesEveryBucket) {
  auto group = FakeGroup::create(2, "dp");
  run_ranks(2, [&](int r) {
    auto buf = make_buffer(r);
    auto dp = group->member(r);
    BucketEngine e(buf, dp, BucketCollective::AllReduceAvg, small_buckets());
    reduce_all(e, *buf);
    const float* g = buf->flat_grads().f32();
    for (int64_t i = 0; i < buf->numel(); ++i)
      ASSERT_EQ(g[i], (grad_of(0, i) + grad_of(1, i)) * 0.5f) << i;
    const comm::CommStats s = dp->stats();
    EXPECT_EQ(s.by_op.count("reduce_scatter"), 0u);
    EXPECT_EQ(s.by_op.at("all_reduce").count, static_cast<uint64_t>(e.size()));
    EXPECT_EQ(e.result_begin(1), e.buckets()[1].begin);
    EXPECT_EQ(e.result_end(1), e.buckets()[1].end);
  });
}

TEST(BucketEngine, ReduceScatterAveragesOnlyThisRanksShard) {
  for (bool bf16 : {false, true}) {
    auto group = FakeGroup::create(2, "dp");
    run_ranks(2, [&](int r) {
      auto buf = make_buffer(r);
      auto dp = group->member(r);
      BucketEngine e(buf, dp, BucketCollective::ReduceScatterAvg, small_buckets(bf16));
      reduce_all(e, *buf);
      const float* g = buf->flat_grads().f32();
      for (const Bucket& b : e.buckets()) {
        EXPECT_EQ(e.result_begin(b.index), b.shard_begin(r, 2));
        EXPECT_EQ(e.result_end(b.index), b.shard_end(r, 2));
        // The counts the reduce-scatter (and ZeRO's gathers) use: each rank's
        // shard, together the whole bucket.
        const std::vector<int64_t> counts = e.shard_counts(b.index);
        ASSERT_EQ(counts.size(), 2u);
        EXPECT_EQ(counts[r], b.shard_end(r, 2) - b.shard_begin(r, 2));
        EXPECT_EQ(counts[0] + counts[1], b.end - b.begin);
        // Every value here is a multiple of 1/8 below 2^8: exact in bf16.
        for (int64_t i = b.shard_begin(r, 2); i < b.shard_end(r, 2); ++i)
          ASSERT_EQ(g[i], (grad_of(0, i) + grad_of(1, i)) * 0.5f) << i;
        // The other rank's shard is left as this rank's own gradients.
        for (int64_t i = b.shard_begin(1 - r, 2); i < b.shard_end(1 - r, 2); ++i)
          ASSERT_EQ(g[i], grad_of(r, i)) << i;
      }
      const comm::CommStats s = dp->stats();
      EXPECT_EQ(s.by_op.count("all_reduce"), 0u);
      EXPECT_EQ(s.by_op.at("reduce_scatter").count, static_cast<uint64_t>(e.size()));
    });
  }
}

TEST(BucketEngine, PlanResetsReadinessAndBuckets) {
  auto group = FakeGroup::create(2, "dp");
  run_ranks(2, [&](int r) {
    auto buf = make_buffer(r);
    BucketEngine e(buf, group->member(r), BucketCollective::AllReduceAvg, small_buckets());
    const int before = e.size();
    ASSERT_GT(before, 1);
    e.begin();
    mark_bucket(e, 0);
    e.launch_ready_in_order();
    StepCommStats stats;
    stats.bucket_seconds.assign(e.size(), 0);
    e.wait(0);
    e.account(0, stats);
    e.plan(1000);  // one bucket holds everything
    EXPECT_EQ(e.size(), 1);
    EXPECT_EQ(e.sizing().cap_mb, 1000);
    EXPECT_EQ(e.launched(), 0);
    EXPECT_EQ(e.bucket_of(static_cast<int>(buf->params().size()) - 1), 0);
    e.begin();
    // Every parameter pending again, in the one new bucket.
    for (int p = 0; p + 1 < static_cast<int>(buf->params().size()); ++p) e.mark_ready(p);
    e.launch_ready_in_order();
    EXPECT_EQ(e.launched(), 0);
    e.mark_ready(static_cast<int>(buf->params().size()) - 1);
    e.launch_ready_in_order();
    EXPECT_EQ(e.launched(), 1);
    wait_all(e, stats);
  });
}

}  // namespace
}  // namespace weft
