// AdamW over owned ranges: compact state, sharded steps equal to the full
// step, the master copy, and the range helpers ZeRO builds on.
#include <gtest/gtest.h>

#include <vector>

#include "model/llama.h"
#include "optim/adamw.h"

namespace weft {
namespace {

OptimConfig optim() {
  OptimConfig o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  return o;
}

std::vector<float> ramp(int64_t n, float scale) {
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = scale * static_cast<float>((i * 37) % 101 - 50) / 50.0f;
  return x;
}

TEST(ParamRanges, WithinClipsToAShardAndKeepsDecay) {
  std::vector<ParamRange> all = {{0, 10, true}, {10, 5, false}, {15, 20, true}};
  auto s = ranges_within(all, 8, 20);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].offset, 8);
  EXPECT_EQ(s[0].numel, 2);
  EXPECT_TRUE(s[0].decay);
  EXPECT_EQ(s[1].offset, 10);
  EXPECT_EQ(s[1].numel, 5);
  EXPECT_FALSE(s[1].decay);
  EXPECT_EQ(s[2].offset, 15);
  EXPECT_EQ(s[2].numel, 5);
  EXPECT_TRUE(ranges_within(all, 35, 40).empty());
}

TEST(AdamWShards, ShardedStepsEqualTheFullStepWithCompactState) {
  const int64_t n = 35;
  std::vector<ParamRange> all = {{0, 10, true}, {10, 5, false}, {15, 20, true}};
  std::vector<float> full = ramp(n, 1.0f), sharded = full;
  const std::vector<float> g = ramp(n, 0.3f);
  AdamW whole(optim(), all);
  // Two "ranks" own [0, 18) and [18, 35): each holds state for its part only.
  AdamW a(optim(), ranges_within(all, 0, 18)), b(optim(), ranges_within(all, 18, n));
  EXPECT_EQ(whole.state_numel(), n);
  EXPECT_EQ(a.state_numel(), 18);
  EXPECT_EQ(b.state_numel(), 17);
  EXPECT_EQ(a.state_bytes() + b.state_bytes(), whole.state_bytes());
  for (int step = 0; step < 3; ++step) {
    whole.step(Tensor::f32(full.data(), {n}), Tensor::f32(const_cast<float*>(g.data()), {n}), 1e-2);
    for (AdamW* o : {&a, &b}) {
      o->begin_step();
      for (size_t i = 0; i < o->ranges().size(); ++i) {
        const ParamRange& r = o->ranges()[i];
        o->step_range(i, Tensor::f32(sharded.data() + r.offset, {r.numel}),
                      Tensor::f32(const_cast<float*>(g.data()) + r.offset, {r.numel}), 1e-2);
      }
    }
  }
  EXPECT_EQ(full, sharded);
  // Compact state: b's first state element belongs to parameter element 18.
  EXPECT_EQ(b.exp_avg().f32()[0], whole.exp_avg().f32()[18]);
  EXPECT_EQ(b.exp_avg_sq().f32()[16], whole.exp_avg_sq().f32()[34]);
  EXPECT_EQ(a.step_count(), 3);
}

TEST(AdamWShards, MasterCopyDrivesABf16WorkingCopy) {
  const int64_t n = 20;
  std::vector<ParamRange> all = {{0, n, true}};
  std::vector<float> ref = ramp(n, 1.0f);
  const std::vector<float> g = ramp(n, 0.2f);
  std::vector<uint16_t> work(n);
  ops::cast(Tensor(work.data(), DType::BF16, {n}), Tensor::f32(ref.data(), {n}));
  // The master starts from the bf16 working copy, like a run that loads bf16 weights.
  std::vector<float> start(n);
  ops::cast(Tensor::f32(start.data(), {n}), Tensor(work.data(), DType::BF16, {n}));
  ref = start;
  AdamW plain(optim(), all), mixed(optim(), all, Device::CPU, /*master_weights=*/true);
  EXPECT_TRUE(mixed.has_master());
  EXPECT_EQ(mixed.state_bytes(), 3 * n * 4);
  mixed.load_master(Tensor(work.data(), DType::BF16, {n}));
  for (int step = 0; step < 4; ++step) {
    plain.step(Tensor::f32(ref.data(), {n}), Tensor::f32(const_cast<float*>(g.data()), {n}), 1e-2);
    mixed.step(Tensor(work.data(), DType::BF16, {n}), Tensor::f32(const_cast<float*>(g.data()), {n}), 1e-2);
  }
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(mixed.master().f32()[i], ref[i]) << i;  // updates are not lost to bf16 rounding
    uint16_t want;
    ops::cast(Tensor(&want, DType::BF16, {1}), Tensor::f32(&ref[i], {1}));
    EXPECT_EQ(work[i], want) << i;
  }
}

// A checkpoint holds the moments and the step count; the master copy comes
// with the weights. Restoring the two must not depend on their order: a
// load_state after load_master once overwrote the master with a stale one.
TEST(AdamWShards, StateAndMasterLoadInEitherOrder) {
  const int64_t n = 20;
  std::vector<ParamRange> all = {{0, 12, true}, {12, 8, false}};
  std::vector<float> weights = ramp(n, 1.0f), stale = ramp(n, -3.0f);
  const std::vector<float> g = ramp(n, 0.2f);
  // The "checkpoint": moments and a step count, and no master copy.
  AdamW saved(optim(), all);
  for (int step = 0; step < 3; ++step)
    saved.step(Tensor::f32(stale.data(), {n}), Tensor::f32(const_cast<float*>(g.data()), {n}), 1e-2);
  AdamW host = saved.copy_to(Device::CPU);
  EXPECT_FALSE(host.has_master());
  EXPECT_EQ(host.step_count(), 3);

  auto restored = [&](bool state_first) {
    AdamW o(optim(), all, Device::CPU, /*master_weights=*/true);
    o.load_master(Tensor::f32(stale.data(), {n}));  // what init left there
    if (state_first) o.load_state(host);
    o.load_master(Tensor::f32(weights.data(), {n}));
    if (!state_first) o.load_state(host);
    return o;
  };
  for (bool state_first : {true, false}) {
    SCOPED_TRACE(state_first ? "state first" : "weights first");
    AdamW o = restored(state_first);
    EXPECT_EQ(o.step_count(), 3);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(o.master().f32()[i], weights[i]) << i;
      ASSERT_EQ(o.exp_avg().f32()[i], saved.exp_avg().f32()[i]) << i;
      ASSERT_EQ(o.exp_avg_sq().f32()[i], saved.exp_avg_sq().f32()[i]) << i;
    }
  }
}

TEST(AdamWShards, AStepWithANeverLoadedMasterAborts) {
  const int64_t n = 4;
  std::vector<float> p(n, 1.0f), g(n, 0.5f);
  AdamW mixed(optim(), {{0, n, true}}, Device::CPU, /*master_weights=*/true);
  EXPECT_DEATH(mixed.step(Tensor::f32(p.data(), {n}), Tensor::f32(g.data(), {n}), 1e-2),
               "master copy that was never loaded");
  mixed.load_master(Tensor::f32(p.data(), {n}));
  mixed.step(Tensor::f32(p.data(), {n}), Tensor::f32(g.data(), {n}), 1e-2);
  EXPECT_EQ(mixed.step_count(), 1);
}

TEST(AdamWShards, DefaultRangesDecayOnlyLinearWeights) {
  ModelConfig m;
  m.vocab_size = 16;
  m.d_model = 8;
  m.n_layers = 1;
  m.n_heads = 2;
  m.n_kv_heads = 2;
  m.ffn_hidden = 8;
  m.max_seq_len = 4;
  auto table = llama_param_table(m);
  auto ranges = default_param_ranges(table, optim());
  ASSERT_EQ(ranges.size(), table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(ranges[i].offset, table[i].offset);
    EXPECT_EQ(ranges[i].decay, table[i].kind == ParamKind::Linear) << table[i].name;
  }
}

TEST(Clip, CoefficientOnlyBelowOne) {
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_coefficient(5.0, 0.0), 1.0);
  EXPECT_NEAR(clip_coefficient(4.0, 1.0), 0.25, 1e-6);
}

}  // namespace
}  // namespace weft
