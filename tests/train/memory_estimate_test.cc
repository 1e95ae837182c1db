// The memory estimate against what a real Trainer holds, the limits it is
// compared with, and the safetensors header bounds that must not overflow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/llama.h"
#include "train/hf_weights.h"
#include "train/memory_estimate.h"
#include "train/safetensors.h"
#include "train/train_util.h"

namespace weft {
namespace {

using testing::fresh_dir;
using testing::small_config;
using testing::write_file;

// The estimate's state and activations are exactly what the trainer
// allocates, for each setting that changes them on one rank.
TEST(MemoryEstimate, MatchesWhatTheTrainerHolds) {
  const auto dir = fresh_dir("memest");
  struct Case {
    const char* name;
    std::function<void(WorkerConfig&)> set;
  };
  const std::vector<Case> cases = {
      {"f32 dp", [](WorkerConfig&) {}},
      {"bf16 dp", [](WorkerConfig& c) { c.train.dtype = WorkingDtype::Bf16; }},
      {"tied", [](WorkerConfig& c) { c.model.tie_embeddings = true; }},
      {"isp recompute 1", [](WorkerConfig& c) {
         c.parallel.strategy = Strategy::Isp;
         c.parallel.isp.recompute_blocks = 1;
       }},
      {"logits in chunks", [](WorkerConfig& c) { c.train.logits_chunk_mb = 0.002; }},
      {"isp bf16", [](WorkerConfig& c) {
         c.parallel.strategy = Strategy::Isp;
         c.train.dtype = WorkingDtype::Bf16;
       }},
      {"pointwise recompute", [](WorkerConfig& c) { c.train.recompute = Recompute::Pointwise; }},
      {"head_dim apart from d_model / n_heads", [](WorkerConfig& c) { c.model.explicit_head_dim = 2 * c.model.head_dim(); }},
      {"head_dim, pointwise recompute, isp recompute 1", [](WorkerConfig& c) {
         c.model.explicit_head_dim = c.model.head_dim() + 2;
         c.train.recompute = Recompute::Pointwise;
         c.parallel.strategy = Strategy::Isp;
         c.parallel.isp.recompute_blocks = 1;
       }},
      {"pointwise recompute, isp recompute 1, bf16", [](WorkerConfig& c) {
         c.train.recompute = Recompute::Pointwise;
         c.train.dtype = WorkingDtype::Bf16;
         c.parallel.strategy = Strategy::Isp;
         c.parallel.isp.recompute_blocks = 1;
       }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    WorkerConfig c = small_config((dir / k.name).string());
    k.set(c);
    c.train.steps = 1;
    validate(c);
    const MemoryEstimate e = estimate_memory(resolved(c), 1);
    Trainer t(c);
    const TrainSummary s = t.run();
    EXPECT_EQ(e.params, s.memory.params);
    EXPECT_EQ(e.grads, s.memory.grads);
    EXPECT_EQ(e.optimizer, s.memory.optimizer);
    EXPECT_EQ(e.activations, static_cast<int64_t>(t.model().activation_bytes()));
    // Never below the state it must hold.
    EXPECT_GE(e.total(), s.memory.params + s.memory.grads + s.memory.optimizer);
  }
  std::filesystem::remove_all(dir);
}

// train.logits_chunk_mb on the user's path: the run a config trains with its
// logits a few rows at a time is the one it trains with them whole (the
// same sums, in chunks), in less activation memory.
TEST(MemoryEstimate, ChunkedLogitsTrainTheSameRunInLessMemory) {
  const auto dir = fresh_dir("chunked-logits");
  WorkerConfig c = small_config((dir / "whole").string());
  c.train.steps = 5;
  Trainer whole(c);
  const TrainSummary a = whole.run();
  c.train.out_dir = (dir / "chunked").string();
  c.train.logits_chunk_mb = 0.002;
  validate(c);
  Trainer chunked(c);
  ASSERT_GT(chunked.model().logits_chunk_rows(), 0);
  const TrainSummary b = chunked.run();
  ASSERT_LT(chunked.model().logits_chunk_rows(), int64_t(c.train.micro_batch) * c.train.seq_len);
  EXPECT_LT(chunked.model().activation_bytes(), whole.model().activation_bytes());
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_NEAR(b.losses[i], a.losses[i], 1e-5 * a.losses[i]) << i;
  c.train.logits_chunk_mb = -1;
  auto p = find_problem(c);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->path, "train.logits_chunk_mb");
  std::filesystem::remove_all(dir);
}

// train.recompute on the user's path: pointwise recompute trains the run that
// keeps every activation, bit for bit, in less activation memory; auto is
// none on the CPU; a bad value names the field.
TEST(MemoryEstimate, PointwiseRecomputeTrainsTheSameRunInLessMemory) {
  const auto dir = fresh_dir("pointwise");
  WorkerConfig c = small_config((dir / "kept").string());
  c.train.steps = 5;
  c.train.dtype = WorkingDtype::Bf16;
  Trainer kept(c);
  EXPECT_FALSE(kept.model().recompute_pointwise());  // auto on the CPU
  const TrainSummary a = kept.run();
  c.train.out_dir = (dir / "pointwise").string();
  c.train.recompute = Recompute::Pointwise;
  validate(c);
  Trainer pointwise(c);
  ASSERT_TRUE(pointwise.model().recompute_pointwise());
  const TrainSummary b = pointwise.run();
  EXPECT_LT(pointwise.model().activation_bytes(), kept.model().activation_bytes());
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(b.losses[i], a.losses[i]) << i;
  // On cuda auto is pointwise: [N, 2 d + ffn] less per block of gpt2-124m's 12, one [N, d + ffn] scratch more.
  WorkerConfig g = preset("gpt2-124m");
  g.device = ComputeDevice::Cuda;
  const MemoryEstimate on = estimate_memory(resolved(g), 1);
  g.train.recompute = Recompute::None;
  const int64_t N = int64_t(g.train.micro_batch) * g.train.seq_len, C = g.model.d_model, F = g.model.ffn();
  EXPECT_EQ(estimate_memory(resolved(g), 1).activations - on.activations, (12 * (2 * C + F) - (C + F)) * N * 2);
  // A spelling that is not a mode is refused where the config is read.
  try {
    parse_config("train: {recompute: everything}\n");
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.recompute: 'everything' is not one of auto, none, pointwise"),
              std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// ZeRO shards the optimizer state over the ranks; stage 2 adds the owned
// gradient shard; ISP divides the matrices by wp and adds its pool.
TEST(MemoryEstimate, ShardingStrategiesHoldLessOptimizerStateOrWeights) {
  WorkerConfig c = preset("gpt2-124m");
  c.device = ComputeDevice::Cpu;
  c.train.dtype = WorkingDtype::F32;
  const MemoryEstimate dp = estimate_memory(resolved(c), 4);
  c.parallel.strategy = Strategy::Zero;
  const MemoryEstimate z1 = estimate_memory(resolved(c), 4);
  EXPECT_NEAR(static_cast<double>(z1.optimizer), dp.optimizer / 4.0, 16);
  EXPECT_EQ(z1.params, dp.params);
  c.parallel.zero.stage = 2;
  const MemoryEstimate z2 = estimate_memory(resolved(c), 4);
  EXPECT_NEAR(static_cast<double>(z2.grads - dp.grads), dp.grads / 4.0, 16);
  c.parallel.strategy = Strategy::Isp;
  c.parallel.wp = 4;
  const MemoryEstimate isp = estimate_memory(resolved(c), 4);
  // The weight shard is a quarter of the matrices; the two-slot pool of
  // gathered full weights (here the 50304 x 768 embedding) comes on top.
  const int64_t pool = 2 * int64_t{50304} * 768 * 4;
  EXPECT_NEAR(static_cast<double>(isp.params - pool), dp.params / 4.0, dp.params / 100.0);
  EXPECT_LT(isp.optimizer, dp.optimizer / 3);
  c.parallel.isp.recompute_blocks = c.model.n_layers;
  EXPECT_LT(estimate_memory(resolved(c), 4).activations, isp.activations / 2);
  // Sizes that overflow 64 bits saturate instead of wrapping.
  c = preset("tiny");
  c.model.d_model = 1 << 20;
  c.model.n_layers = 1 << 30;
  EXPECT_GT(estimate_memory(resolved(c), 1).total(), int64_t{1} << 60);
}

TEST(MemoryLimits, CgroupFileIsSharedByLocalRanksAndMaxMeansNone) {
  const auto dir = fresh_dir("memlimit");
  const std::string file = write_file(dir / "memory.max", "1073741824\n");
  auto limits = host_memory_limits({{kEnvCgroupMemoryMax, file}}, contract::parse_launch_env({{"LOCAL_WORLD_SIZE", "4"}}));
  ASSERT_FALSE(limits.empty());
  EXPECT_EQ(limits[0].bytes, 268435456);
  EXPECT_NE(limits[0].source.find("1.00 GiB (" + file + ") / 4 ranks on this host"), std::string::npos)
      << limits[0].source;
  write_file(dir / "memory.max", "max\n");
  for (const MemoryLimit& l : host_memory_limits({{kEnvCgroupMemoryMax, file}}))
    EXPECT_EQ(l.source.find("cgroup"), std::string::npos) << l.source;

  // The check: refused with the estimate, the limit and the fields; skipped on request.
  write_file(dir / "memory.max", "10000000\n");
  const WorkerConfig c = resolved(preset("tiny"));
  try {
    check_memory_fits(c, {{kEnvCgroupMemoryMax, file}});
    ADD_FAILURE() << "a 10 MB cgroup limit must refuse the tiny preset";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("memory: this rank needs about " + format_bytes(estimate_memory(resolved(c), 1).total())), std::string::npos) << m;
    EXPECT_NE(m.find("but can have 9.5 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("model.d_model"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(check_memory_fits(c, {{kEnvCgroupMemoryMax, file}, {kEnvSkipMemoryCheck, "1"}}));
  std::filesystem::remove_all(dir);
}

// A safetensors file whose header is exactly `header` and whose data section
// has `data_bytes` zero bytes.
std::string write_safetensors(const std::filesystem::path& p, const std::string& header, size_t data_bytes) {
  std::ofstream out(p, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header;
  out << std::string(data_bytes, '\0');
  return p.string();
}

// [2, 2^61 + 16384] F32 is 2^64 + 131072 bytes: wrapped, 131072, which the
// offsets [0, 131072] would match.
TEST(SafetensorsBounds, AShapeWhoseSizeOverflowsIsRejected) {
  const auto dir = fresh_dir("stoverflow");
  const std::string path =
      write_safetensors(dir / "x.safetensors",
                        R"({"w": {"dtype": "F32", "shape": [2, 2305843009213710336], "data_offsets": [0, 131072]}})",
                        131072);
  for (int reader = 0; reader < 2; ++reader) {
    try {
      if (reader == 0)
        SafetensorsFile::load(path);
      else
        SafetensorsIndex::open(path);
      ADD_FAILURE() << "reader " << reader << " accepted an overflowing shape";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("tensor 'w' has shape [2,2305843009213710336], whose byte count overflows"),
                std::string::npos)
          << e.what();
    }
  }
  // An element count that overflows int64 on its own.
  const std::string path2 = write_safetensors(
      dir / "y.safetensors",
      R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0);
  EXPECT_THROW(SafetensorsIndex::open(path2), CheckpointError);
  // A dimension beyond int64.
  const std::string path3 = write_safetensors(
      dir / "z.safetensors", R"({"w": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 0]}})", 0);
  EXPECT_THROW(SafetensorsIndex::open(path3), CheckpointError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weft
