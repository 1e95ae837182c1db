// BucketEngine: the gradient buckets of a data-parallel group and their
// reductions, shared by every strategy that syncs gradients in buckets
// (DataParallel's all-reduce, ZeroGradSync's reduce-scatter, and through them
// ISP's sync of the weight shards over wdp).
//
// Owns the bucket plan (BucketSizing, plan_buckets), per-bucket readiness
// (how many parameters of each bucket are not yet reported), the launch
// cursor, the bf16 wire staging, the in-flight Work and the issue times that
// become comm spans. The collective is the strategy's choice
// (BucketCollective): an Avg all-reduce of the whole bucket, or an Avg
// reduce-scatter that leaves this rank's shard (Bucket::shard_begin/end) in
// place. What a strategy does with a reduced bucket (stepping, accumulating,
// gathering) stays with the strategy.
//
// Per micro-batch that communicates: begin() resets readiness; mark_ready()
// for every parameter; launch_ready_in_order() issues every bucket whose
// parameters are all ready and whose predecessors are launched; then wait(b)
// and account(b) per bucket.
// Invariants: buckets launch strictly in index order on every rank (a bucket
// that fills early waits for its predecessors), so every rank issues the same
// collectives in the same order; a bucket's gradients are not touched between
// its launch and its wait.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "model/param_and_grad_buffer.h"
#include "parallel/grad_buckets.h"
#include "parallel/grad_sync.h"

namespace weft {

enum class BucketCollective : uint8_t {
  AllReduceAvg,      // every rank ends with the whole bucket averaged
  ReduceScatterAvg,  // rank r ends with its shard of the bucket averaged, in place
};

struct BucketEngineOptions {
  double bucket_cap_mb = 0;    // MiB of fp32 gradients per bucket; 0 = auto (resolve_bucket_sizing)
  double first_bucket_mb = 0;  // 0 = bucket_cap_mb, or the rule's first bucket when auto
  bool bf16_wire = false;      // reduce a bf16 copy of the gradients
  // Tests only (the negative control of the multi-rank checks): every bucket
  // is a barrier instead of its reduction, so each rank steps on its own
  // gradients. Set by WEFT_TEST_UNSYNCED_GRADS=1 (bucket_options; data parallelism only).
  bool unsynced_for_tests = false;
};
// The parallel section's bucket settings (bucket_cap_mb, first_bucket_mb,
// bf16_wire), and the tests' WEFT_TEST_UNSYNCED_GRADS=1: what every bucketed
// strategy reads of the config.
BucketEngineOptions bucket_options(const ParallelConfig& p);

class BucketEngine {
 public:
  // Plans the buckets of `buffer`'s gradients for `group` at once.
  BucketEngine(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr group,
               BucketCollective collective, BucketEngineOptions opt);

  // Buckets anew for `cap_mb` (the first bucket follows BucketSizing::with_cap);
  // readiness and in-flight handles start empty. Nothing may be in flight.
  void plan(double cap_mb);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  int size() const { return static_cast<int>(buckets_.size()); }
  int bucket_of(int param) const { return bucket_of_param_.at(param); }
  const BucketSizing& sizing() const { return sizing_; }
  BucketCollective collective() const { return collective_; }
  bool bf16_wire() const { return opt_.bf16_wire; }
  // The elements bucket b's reduction leaves on this rank: the whole bucket
  // (all-reduce) or this rank's shard (reduce-scatter).
  int64_t result_begin(int b) const;
  int64_t result_end(int b) const;
  // Elements of bucket b each rank's reduce-scatter shard holds, by rank.
  std::vector<int64_t> shard_counts(int b) const;

  // A micro-batch whose gradients are reduced: every parameter pending again.
  void begin();
  // Parameter `param` is ready (once per micro-batch; twice is a bug).
  void mark_ready(int param);
  // Launches, in index order, every bucket whose parameters are all ready
  // and whose predecessors are launched.
  void launch_ready_in_order();
  // Backward is over: every parameter must have been reported.
  void check_all_ready() const;
  int launched() const { return next_launch_; }  // buckets [0, launched()) are issued

  bool completed(int b) const { return works_[b]->completed(); }
  // Waits for bucket b's reduction (launched, not yet released) and, with a
  // bf16 wire, takes its result back into the f32 gradients. Callers time it
  // on the compute stream (ops::StreamTimer / ops::StreamWaits).
  void wait(int b);
  // Bucket b's reduce time into stats.bucket_seconds[b] (added) and its span
  // into stats.spans; the handle is released (b is no longer in flight).
  void account(int b, StepCommStats& stats);

 private:
  void launch(int b);

  std::shared_ptr<ParamAndGradBuffer> buf_;
  comm::CommunicatorPtr group_;
  BucketCollective collective_;
  BucketEngineOptions opt_;
  BucketSizing sizing_;  // resolved; plan() replaces the cap
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_param_;
  std::vector<int> pending_;                          // params not yet ready, per bucket
  std::vector<comm::WorkPtr> works_;                  // per bucket, this micro-batch
  std::vector<CommSpans::Clock::time_point> issued_;  // when each bucket's reduction was issued
  Buffer wire_;                                       // bf16 staging, same layout as the gradients
  int next_launch_ = 0;
};

}  // namespace weft
