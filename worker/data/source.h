// weft data sources from the config: the factory over the synthetic chain
// (data/markov.h) and llm.c shards (data/shard_source.h), with packed
// documents marked where the config asks (data/token_source.h: the batch and
// the TokenSource interface).
#pragma once

#include <memory>

#include "config/config.h"
#include "data/markov.h"
#include "data/shard_source.h"
#include "data/token_source.h"

namespace weft {

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
