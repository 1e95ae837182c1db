// Checkpoints: dir/step-N/{model.safetensors (or model-0000k-of-0000N
// shards + model.safetensors.index.json), config.json,
// generation_config.json, optim-rank-R.safetensors, meta.json} and dir/latest
// naming the newest complete one. The model files are a Hugging Face model
// directory (train/hf_weights.h); the rest is weft's resume state.
//
// Strategies that shard weights or optimizer state over several ranks (ISP,
// ZeRO) write sharded checkpoints instead: each rank's optim-rank-R file also
// holds its weights, no model files until the run's last checkpoint (see
// ShardedWrite), and export_hf turns any checkpoint into a model
// directory.
//
// Invariants: a step-N directory is only ever visible complete (written to a
// temporary directory, every file fsynced, then renamed; `latest` replaced by
// rename). meta.json records the size and CRC-32 of every file, so a torn or
// corrupted checkpoint is detected on load and the previous one used instead.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
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
  uint32_t identity = 0;   // load: the checksum of its meta.json (which ranks compare)
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
int64_t reshard_optimizer(const std::string& ckpt, int saved_shards, const std::vector<ParamInfo>& table,
                          AdamW& opt);

// Writes a checkpoint of `model` and `opt` (this rank's optimizer state) after
// `meta.step` steps. Deletes the oldest step-* directories beyond `keep`.
// Returns the checkpoint directory. Throws CheckpointError on I/O failure.
std::string save_checkpoint(const std::string& dir, const Llama& model, const AdamW& opt,
                            const CheckpointMeta& meta, int keep, int rank = 0);

// A sharded checkpoint, for strategies that shard weights or optimizer state
// (ISP, ZeRO; RunCheckpoints::save), in three phases so the rank files can be
// written while training goes on. Every rank of `group` takes part at the
// same step with its own ranges in the full model's flat layout and writes
// optim-rank-R.safetensors ("exp_avg", "exp_avg_sq", "weights" f32; its
// "layout" metadata names the ranges); no rank holds the full model, and
// meta.json marks the weights "sharded". begin() (collective: group rank 0
// makes the staging directory), write() (this rank's file; no collectives,
// so any thread may run it), finish() (collective: rank 0 records every file
// in meta.json, with export_hf (a run's last checkpoint) after streaming the
// HF model files tensor by tensor from the rank files, so the directory
// loads in from_pretrained, and publishes; every rank throws here what its
// write met).
class ShardedWrite {
 public:
  // `device`: where the group's collectives take their buffers (NCCL's are
  // on the GPU; the files are written from host memory either way).
  ShardedWrite(std::string dir, const ModelConfig& cfg, const CheckpointMeta& meta, int keep,
               const OptimizerShard& shard, comm::Communicator& group, Device device);
  void begin();
  // opt's moments and `weights`: host f32 of opt's ranges, in order, in as
  // many pieces as they lie in.
  void write(const AdamW& opt, const std::vector<SafetensorsWriter::Piece>& weights);
  std::string finish(bool export_hf);
  int64_t step() const { return meta_.step; }

 private:
  void attempt(const std::function<void()>& fn);  // records the first failure

  std::string dir_;
  ModelConfig cfg_;
  CheckpointMeta meta_;
  int keep_;
  OptimizerShard shard_;
  comm::Communicator& group_;
  Device device_;
  std::string name_, tmp_;
  std::string error_;
  bool not_shared_ = false;
};

// Writes the HF model directory of `checkpoint` (a step-N directory, or a
// checkpoint directory whose `latest` names one) into `out`, which must not
// exist or be empty: model.safetensors or shards (checkpoint.max_shard_mb of
// the run), config.json, generation_config.json, at f32. From a sharded
// checkpoint the weights are streamed from the rank files one tensor at a
// time. Written to a temporary directory and renamed, so `out` is complete
// or absent. Returns the checkpoint exported; throws CheckpointError, or
// StopRequested (nothing left behind) once *stop is non-zero: it is looked at
// before every tensor, so a stop is answered within one tensor's copy.
struct StopRequested : std::runtime_error {
  using std::runtime_error::runtime_error;
};
std::string export_hf(const std::string& checkpoint, const std::string& out,
                      const std::atomic<int>* stop = nullptr);

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
// The same for a model of `cfg` that is not in memory: the weights, whether
// HF files or a sharded checkpoint's rank files, go to load_weights as a
// WeightSource (which reads only what it is asked for).
std::optional<CheckpointMeta> load_latest_checkpoint(const std::string& dir, const ModelConfig& cfg, AdamW& opt,
                                                     const OptimizerShard& shard,
                                                     const std::function<void(const WeightSource&)>& load_weights);

// Weights from `src` into a run: straight into the model's parameters, or
// (via_full: the strategy keeps them, not f32 host memory or sharded)
// through the strategy, which reads just its part where it can
// (StrategyState::load_weights) and otherwise takes a host f32 full model.
void load_weights_into(const WeightSource& src, StrategyState& state, Llama& model, bool via_full);

// The model fields that change a checkpoint's tensor shapes, as
// "model.FIELD: checkpoint X, config Y"; empty when they agree.
std::vector<std::string> model_shape_differences(const ModelConfig& saved, const ModelConfig& now);

// step-N directories in dir, newest first.
std::vector<std::string> list_checkpoints(const std::string& dir);

// N of the newest step-N directory in dir; 0 when there is none.
int64_t newest_checkpoint_step(const std::string& dir);

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
// Why a checkpoint is written, which decides when it is published.
enum class CheckpointKind : int {
  Periodic,  // checkpoint.every: may be written in the background
  Stop,      // a stop signal: published before the process exits
  Final,     // the run's last: published at once, with its HF model files
};

class RunCheckpoints {
 public:
  // `group`: the data-parallel group (sharded files); null when alone.
  RunCheckpoints(const WorkerConfig& cfg, std::string dir, StrategyState& state, Llama& model,
                 bool via_full, int rank, int world, comm::Communicator* group);

  const std::string& dir() const { return dir_; }
  // Loads the latest checkpoint of dir(), if there is one, into the model
  // and the strategy; returns its meta.
  std::optional<CheckpointMeta> resume();
  ~RunCheckpoints();  // waits for a write in flight, which stays unpublished
  struct Saved {
    std::string path;
    int64_t step = 0;
    double seconds = 0;  // training was held up for it (snapshot, writes not overlapped, publishing)
  };
  // Collective over the strategy's group: a checkpoint after
  // `steps_completed` steps. Returns it when it is published now; empty when
  // this rank writes nothing, or when its files are written in the
  // background. That is a sharded checkpoint (a strategy that shards weights
  // or optimizer state over several ranks; ShardedWrite) of CheckpointKind::Periodic
  // with checkpoint.async on: each rank snapshots its part and writes it
  // while training goes on, and complete() publishes it. A Stop or Final
  // checkpoint first publishes the one in flight, then is written and
  // published before save returns: a stopped process has no later step.
  std::optional<Saved> save(int64_t steps_completed, double last_loss, CheckpointKind kind = CheckpointKind::Periodic);
  // Collective: waits for the background write, if one is in flight, and
  // publishes its checkpoint (the trainer calls it after every step and
  // before every save, on every rank). Empty when none was in flight. Throws
  // what the write met, like save.
  std::optional<Saved> complete();

 private:
  bool sharded() const;
  bool async() const;  // checkpoint.async, resolved
  // This rank's optimizer file when the weights are not sharded.
  OptimizerShard shard() const;

  const WorkerConfig& cfg_;
  std::string dir_;
  StrategyState& state_;
  Llama& model_;
  bool via_full_;
  int rank_, world_;
  comm::Communicator* group_;
  // The sharded checkpoint being written in the background: its phases,
  // the snapshot the writer thread writes, and the time it held training up.
  std::unique_ptr<ShardedWrite> pending_;
  std::unique_ptr<AdamW> pending_part_;
  std::thread writer_;
  double pending_blocked_s_ = 0;
};

}  // namespace weft
