// BucketReducer: the gradient reducer of the bucketed strategies
// (DataParallel: all-reduce, ZeroGradSync: reduce-scatter and the parameter
// all-gather, as Megatron-core's DistributedDataParallel with its bucket
// groups), a member of each: the data-parallel group, the bucket engine over
// the model's gradient buffer, the per-bucket parameter all-gathers of a
// sharded placement, the step's communication accounting and the loss
// averaged over the group.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "kernels/stream_timer.h"
#include "parallel/bucket_engine.h"
#include "parallel/grad_sync.h"

namespace weft {

class BucketReducer {
 public:
  BucketReducer(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr dp,
                BucketCollective collective, BucketEngineOptions options);

  // Every rank starts from rank 0's weights, whatever happened before (DDP
  // does the same).
  void broadcast_parameters();

  ParamAndGradBuffer& buffer() const { return *buf_; }
  comm::Communicator& group() const { return *dp_; }
  BucketEngine& engine() { return engine_; }
  const BucketEngine& engine() const { return engine_; }
  StepCommStats& stats() { return stats_; }
  const StepCommStats& stats() const { return stats_; }
  // This step's waits on communication (its exposed time, where a strategy uses it).
  ops::StreamWaits& waits() { return waits_; }
  // The report's group, last step and buckets; the strategy adds its memory
  // and description.
  SyncReport report() const;

  // Issues the all-reduce of this rank's step loss over the group (queued
  // behind the buckets, it costs no round trip of its own); after the Work
  // completed, averaged_loss() is the mean.
  comm::WorkPtr average_loss(double loss);
  double averaged_loss() const { return loss_wire_; }

  // The parameter all-gather of a sharded placement: bucket b's owned shard
  // from every rank into the full parameters, in place (issued in the same
  // order on every rank). wait_gather makes compute wait for it, timed into
  // waits() and its span into stats(); a bucket with none in flight is a no-op.
  void reset_gathers();  // one empty slot per bucket of the current plan
  void launch_gather(int bucket);
  bool gathering(int bucket) const { return ag_[bucket] != nullptr; }
  void wait_gather(int bucket);
  void wait_gathers();  // every bucket's, in bucket order

 private:
  std::shared_ptr<ParamAndGradBuffer> buf_;
  comm::CommunicatorPtr dp_;
  BucketEngine engine_;
  StepCommStats stats_;
  ops::StreamWaits waits_;
  float loss_wire_ = 0;
  std::vector<comm::WorkPtr> ag_;  // per bucket: its parameter all-gather in flight
  std::vector<CommSpans::Clock::time_point> ag_issued_;
};

}  // namespace weft
