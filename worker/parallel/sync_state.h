// StrategyState: what a gradient sync strategy keeps between steps and how
// checkpoints and initial weights reach it: the optimizer (this rank's part),
// the full-precision weights through a host f32 full model, and whether and
// how they are sharded. GradSync (parallel/grad_sync.h) is the step protocol;
// a strategy exposes this side through GradSync::state(), and the trainer's
// checkpoint code (train/checkpoint.h) drives it.
// Invariants: the collective methods (gather_full_weights, flush with
// gathers in flight) are called by every rank of the group in the same order.
#pragma once

#include <string>

#include "model/param_and_grad_buffer.h"
#include "model/weight_source.h"
#include "optim/adamw.h"

namespace weft {

class StrategyState {
 public:
  virtual ~StrategyState() = default;

  // Makes the full parameters present on this rank and waits for every
  // collective still in flight (ZeRO's overlapped parameter gathers); before
  // checkpoints, re-bucketing and the end of a run.
  virtual void flush() {}

  // This rank's optimizer state, and whether this rank writes it (replicated
  // state is written by rank 0 alone).
  virtual AdamW& optimizer() = 0;
  virtual bool writes_optimizer_state() const = 0;
  // Ranks the optimizer state is sharded over (1: replicated); a checkpoint
  // written with N shards resumes only with N (optim-rank-R per shard).
  virtual int optimizer_shards() const { return 1; }
  // What identifies this rank's shard layout (the owned ranges); a resumed
  // shard must have been written with the same. Empty: replicated.
  virtual std::string optimizer_layout() const { return {}; }

  // Initial weights and checkpoints at full precision, through a host f32
  // full model: load_full_weights takes this rank's part of `full` and is the
  // one source of the optimizer's master copy, set from `full` exactly (never
  // from the rounded working weights; a strategy with a master copy, i.e.
  // non-f32 working weights, needs it before the first step, and AdamW aborts
  // otherwise); gather_full_weights is collective and fills every parameter
  // of `full` with the master copy where there is one, else the working
  // weights. The trainer uses them whenever the working weights are not f32
  // host memory, or are sharded, which covers every config with a master copy.
  virtual void load_full_weights(const ParamAndGradBuffer& full) = 0;
  virtual void gather_full_weights(ParamAndGradBuffer& full) = 0;

  // Strategies that keep only a shard of the weights on a rank (ISP), whose
  // optimizer ranges are in the shard's layout, not the model's.
  virtual bool shards_weights() const { return false; }
  // Resuming such a strategy: every range this rank steps, translated into
  // the full model's flat layout (what load_latest_checkpoint fills from any
  // saved layout through reshard_optimizer), moments only; import takes the
  // filled state back.
  virtual AdamW export_optimizer() { return AdamW(OptimConfig{}, {}); }
  virtual void import_optimizer(const AdamW& state) { (void)state; }

  // Sharded checkpoints (strategies that shard weights or optimizer state):
  // what this rank writes, with no rank gathering the full model. Its
  // optimizer state for the ranges it owns (replicated state once over the
  // group), ranges in the full model's flat layout, each element of the
  // model in exactly one rank's part over the group, and the f32 weights of
  // those ranges (the master copy where there is one) as the result's
  // master copy.
  virtual AdamW export_shard() { return AdamW(OptimConfig{}, {}); }
  // Loads this rank's weights (and master copy) from `src`, reading only
  // what this rank keeps; false when the strategy takes only the full model
  // (load_full_weights). Like load_full_weights, the one source of the
  // master copy.
  virtual bool load_weights(const WeightSource& src) {
    (void)src;
    return false;
  }
};

}  // namespace weft
