// The config -> source factory.
#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>

#include <sys/stat.h>

#include "data/markov.h"
#include "data/sample_order.h"
#include "data/source.h"

namespace weft {

namespace {

// data.document_boundaries eos: the wrapped source's batches with their
// documents marked.
class PackedDocuments : public TokenSource {
 public:
  PackedDocuments(std::unique_ptr<TokenSource> inner, int eos) : inner_(std::move(inner)), eos_(eos) {}
  void fill(Batch& batch, int B, int T, const BatchIndex& at) const override {
    inner_->fill(batch, B, T, at);
    mark_documents(batch, eos_);
  }
  int vocab_size() const override { return inner_->vocab_size(); }
  // The chain's floor counts predictions across documents the same way.
  double entropy_floor() const override { return inner_->entropy_floor(); }
  std::string describe() const override {
    return inner_->describe() + ", documents ended by token " + std::to_string(eos_);
  }

 private:
  std::unique_ptr<TokenSource> inner_;
  int eos_;
};

std::unique_ptr<TokenSource> with_documents(const WorkerConfig& cfg, std::unique_ptr<TokenSource> source) {
  if (!cfg.data.packs_documents()) return source;
  return std::make_unique<PackedDocuments>(std::move(source), cfg.data.eos_token);
}

}  // namespace

std::unique_ptr<TokenSource> make_source(const WorkerConfig& cfg) {
  switch (cfg.data.source) {
    case DataSource::Synthetic:
      return with_documents(cfg, make_markov_source(cfg.model.vocab_size, cfg.data.branching, cfg.data.seed));
    case DataSource::Shards: {
      auto source = make_shard_source(cfg.data.shards, cfg.data.seed);
      // Token ids beyond the embedding table would index out of bounds later,
      // far from the cause; refuse them here.
      if (source->vocab_size() > cfg.model.vocab_size) {
        throw DataError("data.shards: '" + cfg.data.shards + "' holds token id " +
                        std::to_string(source->vocab_size() - 1) + " but model.vocab_size is " +
                        std::to_string(cfg.model.vocab_size));
      }
      return with_documents(cfg, std::move(source));
    }
  }
  throw DataError("data.source: not a source (expected " + contract::mode_choices<DataSource>() + ")");
}

std::unique_ptr<TokenSource> make_eval_source(const WorkerConfig& cfg) {
  const DataConfig& d = cfg.data;
  if (d.source == DataSource::Synthetic) {
    // The training chain, rows from a seed of their own.
    const uint64_t seed = hash_seed(d.seed, kDomainHeldOut, 0);
    return with_documents(cfg, make_markov_source(MarkovChain::random(cfg.model.vocab_size, d.branching, d.seed), seed,
                              "held-out stream of synthetic markov(vocab=" + std::to_string(cfg.model.vocab_size) +
                                  ", branching=" + std::to_string(d.branching) + ", seed=" + std::to_string(d.seed) +
                                  ")"));
  }
  const std::string& glob = cfg.eval.shards;
  if (!cfg.eval.allow_training_shards) {
    // The same files under another glob, a symlink or a hard link are still
    // the training data: a file is its device and inode, not its path.
    std::vector<std::pair<dev_t, ino_t>> train;
    for (const std::string& f : expand_glob(d.shards, "data.shards")) {
      struct stat st {};
      if (::stat(f.c_str(), &st) == 0) train.emplace_back(st.st_dev, st.st_ino);
    }
    for (const std::string& f : expand_glob(glob, "eval.shards")) {
      struct stat st {};
      if (::stat(f.c_str(), &st) != 0) continue;  // opening it names what is wrong
      if (std::find(train.begin(), train.end(), std::make_pair(st.st_dev, st.st_ino)) != train.end())
        throw DataError("eval.shards: '" + f + "' is also a training shard (data.shards '" + d.shards +
                        "'; the same file, by path or by link); evaluate on held-out shards, or set "
                        "eval.allow_training_shards: true");
    }
  }
  auto source = make_shard_source(glob, d.seed, "eval.shards");
  if (source->vocab_size() > cfg.model.vocab_size)
    throw DataError("eval.shards: '" + glob + "' holds token id " + std::to_string(source->vocab_size() - 1) +
                    " but model.vocab_size is " + std::to_string(cfg.model.vocab_size) +
                    " (held-out shards of another tokenizer?)");
  return with_documents(cfg, std::move(source));
}

}  // namespace weft
