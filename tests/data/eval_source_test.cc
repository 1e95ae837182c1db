// Held-out data for evaluation (data/source.h, make_eval_source): a held-out
// stream of the training chain for synthetic data, eval.shards otherwise, and
// the refusals that name eval.shards.
#include <gtest/gtest.h>

#include <vector>

#include "data/data_test_util.h"
#include "data/shard_writer.h"
#include "data/source.h"

namespace weft {
namespace {

using testing_util::data_error_of;
using testing_util::TempDir;

std::vector<int32_t> tokens(int n, int mod) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 7) % mod;
  return t;
}

TEST(EvalSource, SyntheticHeldOutIsTheSameChainOnOtherRows) {
  WorkerConfig cfg = preset("tiny");
  cfg.eval.every = 10;
  auto train = make_source(cfg);
  auto held = make_eval_source(cfg);
  EXPECT_EQ(held->entropy_floor(), train->entropy_floor()) << "the same distribution";
  EXPECT_NE(held->describe().find("held-out"), std::string::npos) << held->describe();
  Batch a, b, again;
  train->fill(a, 4, 32, BatchIndex{0, 0, 1, 0, 1});
  held->fill(b, 4, 32, BatchIndex{0, 0, 1, 0, 1});
  held->fill(again, 4, 32, BatchIndex{0, 0, 1, 0, 1});
  EXPECT_NE(a.inputs, b.inputs) << "held-out rows are not the training rows";
  EXPECT_EQ(b.inputs, again.inputs) << "the same held-out batch every time";
}

TEST(EvalSource, ShardsAreReadFromEvalShards) {
  TempDir dir;
  write_shard(dir.file("train_000.bin"), tokens(5000, 200));
  write_shard(dir.file("val_000.bin"), tokens(3000, 100));
  WorkerConfig cfg = preset("tiny");
  cfg.data.source = DataSource::Shards;
  cfg.data.shards = dir.file("train_*.bin");
  cfg.eval.every = 5;
  cfg.eval.shards = dir.file("val_*.bin");
  auto held = make_eval_source(cfg);
  EXPECT_NE(held->describe().find("val_*.bin"), std::string::npos) << held->describe();
  Batch b;
  held->fill(b, 2, 16, BatchIndex{});
  for (int32_t t : b.inputs) EXPECT_LT(t, 100) << "a token of the held-out shard";
}

TEST(EvalSource, RefusalsNameEvalShards) {
  TempDir dir;
  write_shard(dir.file("train_000.bin"), tokens(5000, 200));
  write_shard(dir.file("big_val.bin"), tokens(3000, 60000));
  WorkerConfig cfg = preset("tiny");
  cfg.data.source = DataSource::Shards;
  cfg.data.shards = dir.file("train_*.bin");
  cfg.eval.every = 5;
  // The training files under another glob.
  cfg.eval.shards = dir.file("train_0*.bin");
  std::string m = data_error_of([&] { make_eval_source(cfg); });
  EXPECT_NE(m.find("eval.shards: '" + dir.file("train_000.bin") + "' is also a training shard"), std::string::npos) << m;
  EXPECT_NE(m.find("eval.allow_training_shards"), std::string::npos) << m;
  cfg.eval.allow_training_shards = true;
  EXPECT_EQ(data_error_of([&] { make_eval_source(cfg); }), "<no error>");
  // Another tokenizer's ids.
  cfg.eval.shards = dir.file("big_val.bin");
  m = data_error_of([&] { make_eval_source(cfg); });
  EXPECT_NE(m.find("eval.shards: '" + dir.file("big_val.bin") + "' holds token id"), std::string::npos) << m;
  EXPECT_NE(m.find("model.vocab_size is"), std::string::npos) << m;
  // Nothing matches.
  cfg.eval.shards = dir.file("missing_*.bin");
  m = data_error_of([&] { make_eval_source(cfg); });
  EXPECT_NE(m.find("eval.shards: no file matches"), std::string::npos) << m;
}

}  // namespace
}  // namespace weft
