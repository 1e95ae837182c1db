#include "train/train_util.h"

#include <gtest/gtest.h>

#include <fstream>

#include "train/checkpoint.h"

namespace weft::testing {

WorkerConfig small_config(const std::string& out_dir) {
  WorkerConfig c = preset("tiny");
  c.model.vocab_size = 32;
  c.model.d_model = 32;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.max_seq_len = 16;
  c.train.seq_len = 16;
  c.train.micro_batch = 4;
  c.train.steps = 20;
  c.train.log_every = 0;
  c.train.out_dir = out_dir;
  c.optim.warmup_steps = 3;
  c.data.branching = 3;
  return c;
}

void keep_only_checkpoint(const std::string& ckpt_dir, const std::string& name) {
  for (const std::string& c : list_checkpoints(ckpt_dir))
    if (std::filesystem::path(c).filename() != name) std::filesystem::remove_all(c);
  std::ofstream(ckpt_dir + "/latest") << name << "\n";
}

void expect_exact_resume(const WorkerConfig& part, const TrainSummary& ref, int k) {
  keep_only_checkpoint(part.train.out_dir + "/checkpoints", "step-" + std::to_string(k));
  const TrainSummary b = Trainer(part).run();
  ASSERT_EQ(b.start_step, k);
  ASSERT_EQ(b.losses.size(), ref.losses.size() - k);
  for (size_t i = 0; i < b.losses.size(); ++i) EXPECT_EQ(b.losses[i], ref.losses[k + i]) << "step " << k + i + 1;
}

}  // namespace weft::testing
