// Checkpoints: dir/step-N/{model.safetensors (or model-0000k-of-0000N
// shards + model.safetensors.index.json), config.json,
// generation_config.json, optim-rank-R.safetensors, meta.json} and dir/latest
// naming the newest complete one. The model files are a Hugging Face model
// directory (train/hf_weights.h); the rest is weft's resume state.
//
// Invariants: a step-N directory is only ever visible complete (written to a
// temporary directory, every file fsynced, then renamed; `latest` replaced by
// rename). meta.json records the size and CRC-32 of every file, so a torn or
// corrupted checkpoint is detected on load and the previous one used instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/llama.h"
#include "optim/adamw.h"
#include "config/config.h"
#include "parallel/sync_state.h"
#include "train/hf_weights.h"
#include "train/safetensors.h"

namespace weft {

struct CheckpointMeta {
  int64_t step = 0;        // optimizer steps completed; training resumes at this step
  double last_loss = 0;    // loss of step-1, for logs
  int world_size = 1;
  std::string config_yaml;  // the config the run was started with
  uint64_t max_shard_bytes = kDefaultMaxShardBytes;  // save: split larger model files
};

// Whose optimizer state a rank saves or loads: replicated (shards 1, rank 0's
// file), or shard `rank` of `shards` (ZeRO: optim-rank-R per rank) with the
// layout (owned ranges) it was written with.
struct OptimizerShard {
  int rank = 0;
  int shards = 1;
  int world = 1;  // this run's world size, for messages
  std::string layout;
};

// Fills `opt`'s state (its own ranges) from all `saved_shards` optimizer files
// of checkpoint directory `ckpt`, whatever world size, strategy or bucket
// layout wrote them (each file's "layout" metadata names its ranges; a file
// without one holds every parameter). Returns the saved step count; throws
// CheckpointError when a file is missing or the shards do not cover `opt`.
int64_t reshard_optimizer(const std::string& ckpt, int saved_shards, const Llama& model, AdamW& opt);

// Writes a checkpoint of `model` and `opt` (this rank's optimizer state) after
// `meta.step` steps. Deletes the oldest step-* directories beyond `keep`.
// Returns the checkpoint directory. Throws CheckpointError on I/O failure.
std::string save_checkpoint(const std::string& dir, const Llama& model, const AdamW& opt,
                            const CheckpointMeta& meta, int keep, int rank = 0);

// The same for sharded optimizer state: every rank of `group` calls it at the
// same step; each writes its optim-rank-R.safetensors into one shared
// temporary directory, group rank 0 also the model, and once all are written
// rank 0 records every file in meta.json and publishes the step (collective;
// returns on every rank after `latest` names it).
std::string save_sharded_checkpoint(const std::string& dir, const Llama& model, const AdamW& opt,
                                    const CheckpointMeta& meta, int keep,
                                    const OptimizerShard& shard, comm::Communicator& group);

// Loads the newest valid checkpoint in dir into model and opt. Returns nullopt
// when dir holds no checkpoint. A corrupt checkpoint is skipped with a warning
// naming the problem; throws CheckpointError if checkpoints exist but none is
// valid (so nothing is silently restarted from scratch), and ConfigError if
// the newest valid one holds a model of another shape than `model`.
// A checkpoint whose optimizer is sharded another way than `shard` (another
// world size, a replicated vs. a sharded strategy, another bucket layout) is a
// ConfigError naming both.
std::optional<CheckpointMeta> load_latest_checkpoint(const std::string& dir, Llama& model,
                                                     AdamW& opt, int rank = 0);
std::optional<CheckpointMeta> load_latest_checkpoint(const std::string& dir, Llama& model,
                                                     AdamW& opt, const OptimizerShard& shard);

// The model fields that change a checkpoint's tensor shapes, as
// "model.FIELD: checkpoint X, config Y"; empty when they agree.
std::vector<std::string> model_shape_differences(const ModelConfig& saved, const ModelConfig& now);

// step-N directories in dir, newest first.
std::vector<std::string> list_checkpoints(const std::string& dir);

// Writes just the model weights (HF names) to a safetensors file, for the
// PyTorch reference tests.
void save_model_weights(const std::string& path, const Llama& model);

// A training run's checkpoints, driven through the strategy's StrategyState:
// where the weights and optimizer state come from and go to, which rank
// writes what, and which optimizer file each rank reads.
//  - weights: the model itself, or with `via_full` (working weights not f32
//    host memory, or sharded) a host f32 full model the strategy gathers into
//    and loads from (its master copy comes from there too);
//  - optimizer state: replicated, written by the one rank that
//    writes_optimizer_state; sharded over the group (optim-rank-R); or, for
//    sharded weights, every rank's ranges in the full model's layout, which
//    any layout resumes.
// Weights and optimizer state load independently: AdamW::load_state leaves
// the master copy, which comes with the weights, alone.
class RunCheckpoints {
 public:
  // `group`: the data-parallel group (sharded files); null when alone.
  RunCheckpoints(const WorkerConfig& cfg, std::string dir, StrategyState& state, Llama& model,
                 bool via_full, int rank, int world, comm::Communicator* group);

  const std::string& dir() const { return dir_; }
  // Loads the latest checkpoint of dir(), if there is one, into the model
  // and the strategy; returns its meta.
  std::optional<CheckpointMeta> resume();
  struct Saved {
    std::string path;
    double seconds = 0;  // writing the files
  };
  // Collective over the strategy's group: a checkpoint after
  // `steps_completed` steps. Empty when this rank writes nothing.
  std::optional<Saved> save(int64_t steps_completed, double last_loss);

 private:
  // This rank's optimizer file when the weights are not sharded.
  OptimizerShard shard() const;

  const WorkerConfig& cfg_;
  std::string dir_;
  StrategyState& state_;
  Llama& model_;
  bool via_full_;
  int rank_, world_;
  comm::Communicator* group_;
};

}  // namespace weft
