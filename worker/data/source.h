// weft data sources. A TokenSource hands out micro-batches of (input, target)
// token rows. The batch for (step, micro, rank) is a pure function of the
// source's seed and those numbers, so a resumed run sees exactly the data the
// uninterrupted run would have seen, whatever was read before.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"

namespace weft {

struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Batch {
  int B = 0, T = 0;
  std::vector<int32_t> inputs;   // [B*T]
  std::vector<int32_t> targets;  // [B*T], targets[b,t] = inputs[b,t+1] of the stream
  // Packed documents (data.document_boundaries eos), else empty: [B*T], the
  // first position of (b, t)'s document in row b (mark_documents).
  std::vector<int32_t> doc_starts;
};

// Fills batch.doc_starts: each eos_token ends its document (it is the
// document's last token), the position after it starts the next; a row
// starts a document at 0 (the rest of one cut by the row boundary).
void mark_documents(Batch& batch, int eos_token);

// Where a batch comes from in the global sample order: rank r of world w takes
// sample rows [(step*accum + micro) * w * B + r * B, ... + B) of the stream, so
// N ranks with batch b see exactly the rows of 1 rank with batch N*b.
struct BatchIndex {
  int64_t step = 0;
  int micro = 0;
  int grad_accum = 1;
  int rank = 0;
  int world = 1;
};

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual void fill(Batch& batch, int B, int T, const BatchIndex& at) const = 0;
  virtual int vocab_size() const = 0;  // smallest vocabulary that covers the data
  // Nats per token a perfect model reaches; negative when unknown.
  virtual double entropy_floor() const { return -1; }
  virtual std::string describe() const = 0;
};

// Seeded random first-order Markov chain over `vocab` tokens: each state moves
// to `branching` successors with random probabilities. Rows start in the
// stationary distribution, so the optimal loss is exactly the entropy rate
// H = sum_i pi_i H(P_i), computed at construction.
std::unique_ptr<TokenSource> make_markov_source(int vocab, int branching, uint64_t seed);

// llm.c token shards (header of 256 int32: magic 20240520, version 1, token
// count; then uint16 tokens). `glob` may match several files. Throws DataError
// naming the file for a foreign, truncated or empty shard, or an empty glob.
// `field` names the glob's config field in errors.
std::unique_ptr<TokenSource> make_shard_source(const std::string& glob, uint64_t seed,
                                               const std::string& field = "data.shards");

// From config: synthetic (vocab = model.vocab_size) or shards; with
// data.document_boundaries eos, every batch has its doc_starts marked.
std::unique_ptr<TokenSource> make_source(const WorkerConfig& cfg);

// The held-out data of eval.*: eval.shards, or for synthetic data the same
// chain with rows drawn from another seed (a stream the training never
// samples). Throws DataError naming eval.shards for shards whose tokens the
// model's vocabulary does not cover, and for eval shards that are training
// shards (the same files) unless eval.allow_training_shards.
std::unique_ptr<TokenSource> make_eval_source(const WorkerConfig& cfg);

}  // namespace weft
