// ZeRO stage 1/2 as a GradSync (docs/architecture/zero.md; optimizer
// sharding as PyTorch's ZeroRedundancyOptimizer with a DDP comm hook does):
// each of the N data-parallel ranks owns shard r of every gradient bucket
// (Bucket::shard_begin/shard_end), keeps the AdamW moments (and a master
// copy, for bf16 weights) for its shards only, and all-gathers its updated
// shard of every bucket back into the full parameters.
//
// Composed of the bucketed reducer (BucketReducer, a member: the bucket layout,
// readiness, launches and in-flight Avg reduce-scatters, the step's
// accounting and the parameter all-gathers) and the sharded optimizer
// placement (ShardedOptimizer: the owned ranges' state, the stage-2 gradient
// shard, the sharded checkpoint; its StrategyState); what is its own is when
// shards are stepped and gathered. Installs itself as the buffer's
// WeightHook: forward waits for a bucket's gather before using its weights
// (overlap_param_gather), backward tells it which layers are done (the
// interleaved step touches a bucket only after every layer using it).
//
// Per optimizer step: prepare_step(lr, clip); per micro-batch: full buckets
// are reduce-scattered (Avg) in index order, during backward unless
// overlap_reduce is off (stage 1: last micro-batch only,
// earlier ones accumulate locally; stage 2: every micro-batch, each result
// added into the owned shard and the bucket's full gradients zeroed for
// reuse); the owned shards are stepped
//   none            after every reduction finished (in clip_and_step),
//   after_backward  as each reduction completes, once backward is done,
//   interleaved     as each completes, while backward continues;
// then each bucket's shards are all-gathered (waited for in clip_and_step, or
// by the next forward with overlap_param_gather). The interleaved step issues
// no collective of its own: ranks see completions at different moments, so
// gathers are issued only after every reduce-scatter, in a fixed order.
//
// Invariants: the owned shards partition the parameters, so the global
// gradient norm is sqrt(sum over ranks of the shard norms); clipping needs it
// before any shard is stepped, so with clipping on (max_norm > 0) the
// reductions still overlap backward but every shard is stepped after the last
// one completed, as with None. Every rank issues the same collectives in the
// same order: buckets in index order, gathers in a fixed order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "kernels/stream_timer.h"
#include "parallel/bucket_reducer.h"
#include "parallel/grad_buckets.h"
#include "parallel/sharded_optimizer.h"
#include "tensor/tensor.h"

namespace weft {

// ZeroOverlap (parallel.zero.overlap) is a mode of contract/weft_modes.h.

struct ZeroOptions {
  int stage = 1;  // 1 or 2
  // parallel.overlap: reduce-scatter each bucket as soon as backward filled
  // it; false launches every bucket after backward (the baseline), and the
  // overlap mode then only orders the steps after backward.
  bool overlap_reduce = true;
  ZeroOverlap overlap = ZeroOverlap::Interleaved;
  bool overlap_param_gather = false;
  BucketEngineOptions
      buckets;  // bucket_options(ParallelConfig); bf16_wire reduce-scatters a bf16 copy
};
// The parallel section's zero and bucket settings.
ZeroOptions zero_options(const ParallelConfig& p);

class ZeroGradSync : public GradSync, private WeightHook {
 public:
  ZeroGradSync(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr dp,
               ZeroOptions opt, const OptimConfig& optim);
  ~ZeroGradSync() override;

  void start() override { reducer_.broadcast_parameters(); }
  void prepare_step(double lr, double max_norm) override;
  void begin_micro_batch(bool last) override;
  void on_grad_ready(int param) override;
  double finish_micro_batch(double loss) override;
  double clip_and_step(double lr, double max_norm) override;
  void rebucket(double cap_mb, int64_t step) override;
  const std::vector<Bucket>& buckets() const { return reducer_.engine().buckets(); }

 private:
  SyncReport make_report(bool describe) const override;
  void before_use(int layer, WeightUse use) override;

  // For the engine's current buckets: the backward positions and forward
  // gathers of each bucket, the gather handles, and the owned ranges (a
  // fresh optimizer).
  void plan_shards();
  void reset_step_stats();  // this step's StepCommStats, empty, one slot per bucket
  bool communicates() const { return o_.stage == 2 || last_; }

  // Waits for bucket b's reduce-scatter and takes its result: bf16 back to
  // f32, stage 2 accumulation; on the last micro-batch its share of the norm,
  // and its step when stepping early.
  void complete(int bucket);
  // Completes, in order, every launched bucket whose layers are all done with
  // backward (`done_pos`: backward position reached) and, when `block`, waits.
  void complete_ready(int done_pos, bool block);
  void step_bucket(int bucket, double lr);

  ZeroOptions o_;
  BucketReducer reducer_;
  ShardedOptimizer optimizer_;
  std::vector<int> last_pos_;  // per bucket: latest backward position of its layers
  std::vector<std::vector<int>> forward_buckets_;  // per backward position: buckets to gather

  std::vector<char> stepped_;
  int next_complete_ = 0;
  int micro_ = 0;
  bool last_ = true;
  bool prepared_ = false, step_early_ = false;
  double lr_ = 0, max_norm_ = 0;
  double shard_sumsq_ = 0;
  float norm_wire_ = 0;
};

}  // namespace weft
