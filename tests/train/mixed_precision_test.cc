// bf16 working weights on the CPU (train.dtype: bf16): the mixed-precision
// path of the GPU (bf16 weights and activations, fp32 gradients, fp32 master
// weights in the optimizer, checkpoints at full precision) with only the
// kernels different, so it runs in CI without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "tensor/bf16.h"
#include "train/checkpoint.h"
#include "train/safetensors.h"
#include "train/train_util.h"
#include "train/trainer.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::fresh_dir;
using testing::keep_only_checkpoint;
using testing::small_config;

// bf16 keeps 8 bits of mantissa: weights, activations and the residual
// gradient are rounded to 2^-9 relative at every op. Over 50 steps of the
// tiny preset that moves the loss by well under 1 % (measured: docs/cuda.md,
// "Mixed precision"); a broken master copy, a lost gradient or an unrounded
// path shows as a diverging or identical curve.
TEST(MixedPrecision, Bf16TracksF32OnTheTinyPreset) {
  const fs::path dir = fresh_dir("bf16_tiny");
  WorkerConfig c = preset("tiny");
  c.train.steps = 50;
  c.train.log_every = 0;
  c.train.out_dir = (dir / "f32").string();
  c.train.dtype = WorkingDtype::F32;
  const TrainSummary f32 = Trainer(c).run();
  c.train.out_dir = (dir / "bf16").string();
  c.train.dtype = WorkingDtype::Bf16;
  Trainer bf16_trainer(c);
  EXPECT_EQ(bf16_trainer.model().buffer().param_dtype(), DType::BF16);
  const TrainSummary bf16 = bf16_trainer.run();
  ASSERT_EQ(f32.losses.size(), 50u);
  ASSERT_EQ(bf16.losses.size(), 50u);
  double worst = 0;
  bool any_different = false;
  for (size_t i = 0; i < 50; ++i) {
    const double rel = std::abs(bf16.losses[i] - f32.losses[i]) / f32.losses[i];
    worst = std::max(worst, rel);
    any_different |= bf16.losses[i] != f32.losses[i];
    EXPECT_LT(rel, 0.01) << "step " << i + 1 << ": bf16 " << bf16.losses[i] << ", f32 " << f32.losses[i];
  }
  EXPECT_TRUE(any_different) << "bf16 and f32 runs gave identical losses: the working dtype is not in effect";
  EXPECT_LT(bf16.losses.back(), bf16.losses.front() - 1.0) << "the bf16 run should learn";
  std::printf("bf16 vs f32 over 50 tiny steps: worst relative loss difference %.3g, final %.4f vs %.4f\n", worst,
              bf16.losses.back(), f32.losses.back());
  // The optimizer holds an f32 master copy besides the two moments.
  EXPECT_EQ(bf16.memory.optimizer, 3 * 4 * bf16.num_params);
  EXPECT_EQ(bf16.memory.params, 2 * bf16.num_params);
  EXPECT_EQ(f32.memory.optimizer, 2 * 4 * f32.num_params);
  fs::remove_all(dir);
}

// Exact resume: the checkpoint holds the f32 master weights, and the working
// bf16 weights are always their rounding, so nothing is lost in between.
TEST(MixedPrecision, Bf16ResumeMatchesUninterruptedRunExactly) {
  const fs::path dir = fresh_dir("bf16_resume");
  WorkerConfig full = small_config((dir / "full").string());
  full.train.dtype = WorkingDtype::Bf16;
  full.train.grad_accum = 2;
  const TrainSummary ref = Trainer(full).run();
  ASSERT_EQ(ref.losses.size(), 20u);

  WorkerConfig part = full;
  part.train.out_dir = (dir / "part").string();
  part.checkpoint.every = 8;
  const TrainSummary a = Trainer(part).run();
  EXPECT_EQ(a.losses, ref.losses) << "checkpointing must not change training";
  testing::expect_exact_resume(part, ref, 8);
  fs::remove_all(dir);
}

// The checkpoint's model file is f32 (the master copy, which Hugging Face
// loads as any f32 model), and the trained working weights are exactly its
// rounding to bf16; the master differs from its rounding somewhere, or the
// checkpoint would have lost precision.
TEST(MixedPrecision, CheckpointHoldsTheMasterWeightsAndWorkingWeightsAreTheirRounding) {
  const fs::path dir = fresh_dir("bf16_master");
  WorkerConfig c = small_config(dir.string());
  c.train.dtype = WorkingDtype::Bf16;
  Trainer t(c);
  t.run();
  const std::string ckpt = list_checkpoints(c.train.out_dir + "/checkpoints").at(0);
  const SafetensorsFile f = SafetensorsFile::load(ckpt + "/model.safetensors");
  const Llama& m = t.model();
  int64_t not_representable = 0;
  for (size_t i = 0; i < m.params().size(); ++i) {
    const ParamInfo& p = m.params()[i];
    const auto& v = f.get(p.name, DType::F32, p.numel);
    const float* master = static_cast<const float*>(v.data);
    const Tensor w = m.param(static_cast<int>(i));
    ASSERT_EQ(w.dtype, DType::BF16);
    const uint16_t* working = static_cast<const uint16_t*>(w.data);
    for (int64_t j = 0; j < p.numel; ++j) {
      ASSERT_EQ(working[j], f32_to_bf16(master[j])) << p.name << "[" << j << "]";
      not_representable += bf16_to_f32(working[j]) != master[j];
    }
  }
  EXPECT_GT(not_representable, m.num_params() / 2) << "the master weights look rounded to bf16";
  fs::remove_all(dir);
}

// Checkpoints are the same format whatever the working dtype: an f32 run
// resumes in bf16 and the other way round, continuing the same curve.
TEST(MixedPrecision, CheckpointsResumeAcrossWorkingDtypes) {
  const fs::path dir = fresh_dir("bf16_cross");
  WorkerConfig c = small_config(dir.string());
  c.train.steps = 20;
  c.checkpoint.every = 10;
  c.train.dtype = WorkingDtype::F32;
  const TrainSummary ref = Trainer(c).run();
  const std::string ckpt_dir = c.train.out_dir + "/checkpoints";
  keep_only_checkpoint(ckpt_dir, "step-10");
  c.train.dtype = WorkingDtype::Bf16;
  const TrainSummary b = Trainer(c).run();
  ASSERT_EQ(b.start_step, 10);
  ASSERT_EQ(b.losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i)
    EXPECT_NEAR(b.losses[i], ref.losses[10 + i], 0.02 * ref.losses[10 + i]) << "step " << 11 + i;
  // And back: the bf16 run's final checkpoint resumes as f32 for 5 more steps.
  c.train.dtype = WorkingDtype::F32;
  c.train.steps = 25;
  const TrainSummary f = Trainer(c).run();
  EXPECT_EQ(f.start_step, 20);
  EXPECT_EQ(f.losses.size(), 5u);
  for (double l : f.losses) EXPECT_NEAR(l, ref.losses.back(), 0.1 * ref.losses.back());
  fs::remove_all(dir);
}

TEST(MixedPrecision, DtypeIsValidatedAndAutoFollowsTheDevice) {
  try {
    parse_config("train: {dtype: fp16}\n", "t.yaml");
    FAIL() << "train.dtype fp16 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "t.yaml:1: train.dtype: 'fp16' is not one of auto, f32, bf16");
  }
  WorkerConfig c = preset("tiny");
  c.train.dtype = WorkingDtype::Auto;
  Trainer t(c);
  EXPECT_EQ(t.model().buffer().param_dtype(), DType::F32) << "auto on the cpu is f32";
  c.train.dtype = WorkingDtype::Bf16;
  c.parallel.strategy = Strategy::Isp;
  EXPECT_FALSE(find_problem(c).has_value()) << "isp trains bf16 working weights too";
}

// The trainer passes train.attention to the kernels (no environment read
// there); on the CPU the one attention runs whatever it says.
TEST(MixedPrecision, TheTrainerPassesTrainAttentionToTheKernels) {
  WorkerConfig c = preset("tiny");
  c.metrics.port = 0;
  const ops::AttentionMode before = ops::attention_mode();
  c.train.attention = Attention::Simt;
  {
    Trainer t(c);
    EXPECT_EQ(ops::attention_mode(), ops::AttentionMode::Simt);
    EXPECT_EQ(t.attention_kernel().name, "cpu");
  }
  c.train.attention = Attention::Cudnn;
  {
    Trainer t(c);
    EXPECT_EQ(ops::attention_mode(), ops::AttentionMode::Cudnn);
    EXPECT_EQ(t.attention_kernel().error, "");
  }
  ops::set_attention_mode(before);
}

}  // namespace
}  // namespace weft
