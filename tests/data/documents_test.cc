// Packed documents (data.document_boundaries eos): each eos token ends its
// document and the next position starts one; every row starts a document;
// the sources make_source and make_eval_source build mark their batches.
#include <gtest/gtest.h>

#include <vector>

#include "data/source.h"

namespace weft {
namespace {

TEST(Documents, EosEndsADocumentAndEveryRowStartsOne) {
  Batch b;
  b.B = 2, b.T = 6;
  const int eos = 9;
  b.inputs = {1, 2, eos, 3, eos, eos,  // row 0: [0, 3), [3, 5), [5, 6)
              4, 5, 6, 7, 8, eos};     // row 1: one document, ended at its last position
  b.targets.assign(b.inputs.size(), 0);
  mark_documents(b, eos);
  EXPECT_EQ(b.doc_starts, (std::vector<int32_t>{0, 0, 0, 3, 3, 5, 0, 0, 0, 0, 0, 0}));
}

TEST(Documents, SourcesMarkTheirBatchesOnlyWithBoundariesOn) {
  WorkerConfig cfg = preset("tiny");
  Batch plain;
  make_source(cfg)->fill(plain, 4, 32, BatchIndex{});
  EXPECT_TRUE(plain.doc_starts.empty());
  cfg.data.document_boundaries = DocumentBoundaries::Eos;
  cfg.data.eos_token = plain.inputs[5];  // a token the chain emits
  cfg.eval.every = 10;
  for (const auto& source : {make_source(cfg), make_eval_source(cfg)}) {
    Batch b;
    source->fill(b, 4, 32, BatchIndex{});
    ASSERT_EQ(b.doc_starts.size(), b.inputs.size());
    Batch want = b;
    mark_documents(want, cfg.data.eos_token);
    EXPECT_EQ(b.doc_starts, want.doc_starts);
    EXPECT_NE(source->describe().find("documents ended by token"), std::string::npos) << source->describe();
  }
  Batch b;
  make_source(cfg)->fill(b, 4, 32, BatchIndex{});
  EXPECT_EQ(b.inputs, plain.inputs) << "the same tokens, documents marked";
  int documents = 0;
  for (size_t i = 0; i < b.doc_starts.size(); ++i) documents += b.doc_starts[i] == int32_t(i % 32);
  EXPECT_GT(documents, 4) << "more documents than rows";
}

}  // namespace
}  // namespace weft
