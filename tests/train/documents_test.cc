// Packed documents through the trainer: with data.document_boundaries eos the
// first step's loss is the model's loss of that batch with its documents
// marked (the trainer hands the starts to forward), not the loss of one
// causal sequence a row; the held-out evaluation marks them too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>
#include <filesystem>

#include "data/source.h"
#include "model/llama.h"
#include "train/train_util.h"
#include "train/trainer.h"

namespace weft {
namespace {

TEST(PackedDocuments, TrainerFeedsTheDocumentsToTheModel) {
  const auto dir = testing::fresh_dir("packed");
  WorkerConfig c = testing::small_config((dir / "run").string());
  c.train.steps = 2;
  c.data.document_boundaries = DocumentBoundaries::Eos;
  c.eval.every = 2;
  c.eval.batches = 2;
  Batch b;
  make_source(c)->fill(b, c.train.micro_batch, c.train.seq_len, BatchIndex{});
  // The token the first batch holds most often (inside rows) ends the documents.
  std::vector<int> count(c.model.vocab_size);
  for (size_t i = 0; i < b.inputs.size(); ++i)
    if ((i + 1) % c.train.seq_len != 0) ++count[b.inputs[i]];
  c.data.eos_token = int(std::max_element(count.begin(), count.end()) - count.begin());
  make_source(c)->fill(b, c.train.micro_batch, c.train.seq_len, BatchIndex{});
  const int eos = c.data.eos_token;
  int inside = 0;
  for (size_t i = 0; i < b.inputs.size(); ++i) inside += b.inputs[i] == eos && (i + 1) % c.train.seq_len != 0;
  ASSERT_GE(inside, 2) << "the batch needs documents that start inside rows";

  Trainer t(c);
  const TrainSummary s = t.run();
  Llama m(c.model);
  m.init(c.train.seed);
  const double packed = m.forward(b.inputs.data(), b.targets.data(), b.B, b.T, b.doc_starts.data());
  const double whole = m.forward(b.inputs.data(), b.targets.data(), b.B, b.T);
  ASSERT_FALSE(s.losses.empty());
  EXPECT_NEAR(s.losses[0], packed, 1e-6 * packed);
  EXPECT_GT(std::fabs(s.losses[0] - whole), 1e-4);
  ASSERT_EQ(s.eval_losses.size(), 1u);
  EXPECT_TRUE(std::isfinite(s.eval_losses[0]));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weft
