// ShardedOptimizer: ZeRO's optimizer placement (as Megatron-core's
// DistributedOptimizer): each of the N data-parallel ranks owns shard r of
// every gradient bucket (Bucket::shard_begin/shard_end) and keeps the AdamW
// moments, and a master copy for non-f32 working weights, of those ranges
// only; at stage 2 also the owned gradient shard, compact, between
// micro-batches. It is ZeroGradSync's StrategyState: the sharded checkpoint
// (each rank writes its ranges), loading only what this rank keeps, the full
// weights assembled for an export, and the re-shard when the buckets change.
// The reducer (ZeroGradSync) decides when a bucket's shard is reduced and
// stepped; flush() waits for its parameter gathers.
// Invariants: the owned ranges partition the parameters over the group, so
// the global gradient norm is the root of the summed shard norms.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/param_and_grad_buffer.h"
#include "optim/adamw.h"
#include "parallel/grad_buckets.h"
#include "parallel/grad_sync.h"
#include "parallel/sync_state.h"

namespace weft {

class ShardedOptimizer : public StrategyState {
 public:
  // `stage` 1 or 2; `flush` waits for the reducer's collectives that write
  // the parameters (called before the state is read or moved).
  ShardedOptimizer(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr dp, int stage,
                   const OptimConfig& optim, std::function<void()> flush);

  // This rank's ranges of `buckets`; a fresh optimizer (no state).
  void plan(const std::vector<Bucket>& buckets);
  // Moves the state to a new bucket layout: `replan` re-plans the reducer's
  // buckets and calls plan() with them. Collective over the group.
  void reshard(const std::function<void()>& replan);

  // The reduced gradient of optimizer range i (stage 2: the compact shard;
  // stage 1: the range inside the gradient buffer).
  Tensor owned_grad(size_t range) const;
  // Stage 2: bucket b's reduced shard into the owned gradient shard (copied on
  // the first micro-batch, added after), and the bucket's full gradients
  // zeroed for the next micro-batch's backward.
  void keep_reduced(const Bucket& b, bool first_micro);
  // Adds bucket b's owned ranges' squared norms, each weighted by `scope`,
  // to `acc` one by one (the step's shard norm, summed in range order).
  void add_sumsq(int bucket, const NormScope& scope, double& acc) const;
  // One AdamW step of bucket b's owned ranges of the parameters.
  void step(int bucket, double lr);
  // Every owned gradient times c (clipping).
  void scale(float c);

  void flush() override { flush_(); }
  AdamW& optimizer() override { return opt_; }
  bool writes_optimizer_state() const override { return true; }
  int optimizer_shards() const override { return dp_->size(); }
  std::string optimizer_layout() const override;
  void load_full_weights(const ParamAndGradBuffer& full) override;
  void gather_full_weights(ParamAndGradBuffer& full) override;
  AdamW export_shard() override;
  bool load_weights(const WeightSource& src) override;

  // Parameters (whole on every rank), the gradients kept between
  // micro-batches (stage 2: the owned shard only) and the sharded state.
  StateBytes state_bytes() const;

 private:
  std::shared_ptr<ParamAndGradBuffer> buf_;
  comm::CommunicatorPtr dp_;
  int stage_;
  OptimConfig optim_cfg_;
  std::function<void()> flush_;
  std::vector<ParamRange> all_ranges_;  // one per parameter, with its decay group
  std::vector<size_t> first_range_;     // per bucket + 1: its optimizer ranges
  std::vector<int> param_of_range_;     // per optimizer range: its parameter
  AdamW opt_;
  Buffer shard_grads_;                  // stage 2: the owned gradient shard, compact
};

}  // namespace weft
