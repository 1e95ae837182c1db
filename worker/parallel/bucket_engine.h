// BucketEngine: the gradient buckets of a flat buffer and their collectives,
// shared by every bucketed strategy (DataParallel's all-reduce, ZeRO's
// reduce-scatter; ISP's shard gradients go through one of the two).
//
// Owns the bucket layout for a cap (plan), per-bucket readiness within a
// micro-batch, the in-flight Work of each bucket, its issue time, and the bf16
// wire copy of the gradients. The strategy decides when a micro-batch
// communicates and what happens to a reduced bucket; the engine launches and
// waits.
//
// Per communicating micro-batch: begin_micro_batch(); mark_ready(param) for
// each gradient backward produces (launching, in index order, every bucket
// whose parameters are all ready, unless launches are deferred); then
// check_all_reported() and launch_ready_in_order() after backward; then
// finish(b) for each launched bucket, which waits for it.
// Invariants: buckets launch strictly in index order on every rank (a bucket
// that fills early waits for its predecessors), so every rank issues the same
// collectives in the same order; a bucket's gradients are not touched between
// its launch and finish(b).
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/param_and_grad_buffer.h"
#include "parallel/grad_buckets.h"
#include "parallel/grad_sync.h"
#include "tensor/tensor.h"

namespace weft {

enum class BucketCollective : uint8_t {
  AllReduce,      // Avg over the group: every rank gets the whole bucket
  ReduceScatter,  // Avg over the group: rank r gets shard r of the bucket, in place
};

struct BucketEngineOptions {
  BucketCollective collective = BucketCollective::AllReduce;
  double bucket_cap_mb = 0;    // MiB of fp32 gradients per bucket; 0 = auto (resolve_bucket_sizing)
  double first_bucket_mb = 0;  // 0 = bucket_cap_mb, or the rule's first bucket when auto
  bool bf16_wire = false;      // reduce a bf16 copy of the gradients (halves bytes on the wire)
};

class BucketEngine {
 public:
  BucketEngine(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr group,
               BucketEngineOptions opt);

  // Buckets for `cap_mb` (> 0); drops every per-micro-batch state.
  void plan(double cap_mb);
  const BucketSizing& sizing() const { return sizing_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  int size() const { return static_cast<int>(buckets_.size()); }
  // "N buckets: ..." and the sizing, for the startup log.
  std::string describe() const;

  // Every bucket waits for all of its parameters again; no Work in flight.
  void begin_micro_batch();
  // Parameter `param`'s gradient is final for this micro-batch; with
  // `launch`, every bucket now complete in index order is launched.
  void mark_ready(int param, bool launch = true);
  void launch_ready_in_order();
  // Fails when backward ended with a parameter never reported.
  void check_all_reported() const;
  // Buckets [0, launched()) have been launched this micro-batch.
  int launched() const { return next_launch_; }
  bool completed(int bucket) const { return works_[bucket]->completed(); }

  // Waits for bucket b's collective and takes its result back from the wire
  // (the whole bucket, or this rank's shard); records its run time in
  // stats.bucket_seconds[b] (added) and its span in stats.spans. Returns the
  // seconds the caller was blocked (host time).
  double finish(int bucket, StepCommStats& stats);

  // This rank's shard of bucket b (ReduceScatter), and every rank's shard size.
  int64_t shard_begin(const Bucket& b) const { return b.shard_begin(group_->rank(), group_->size()); }
  int64_t shard_end(const Bucket& b) const { return b.shard_end(group_->rank(), group_->size()); }
  std::vector<int64_t> shard_counts(const Bucket& b) const;

 private:
  void launch(int bucket);
  Tensor wire() const;

  std::shared_ptr<ParamAndGradBuffer> buf_;
  comm::CommunicatorPtr group_;
  BucketEngineOptions opt_;
  BucketSizing sizing_;  // resolved; plan() replaces the cap
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_param_;
  std::vector<int> pending_;          // params not yet ready, per bucket
  std::vector<comm::WorkPtr> works_;  // per bucket, this micro-batch
  std::vector<CommSpans::Clock::time_point> issued_;
  Buffer wire_;                       // bf16 staging, same layout as the gradients
  int next_launch_ = 0;
};

}  // namespace weft
