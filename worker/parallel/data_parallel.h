// Bucketed data parallelism: gradient all-reduce overlapped with backward
// (semantics of picotron's BucketManager and PyTorch DDP).
//
// Owns the bucket layout, per-bucket readiness, the in-flight Work handles
// and the overlap accounting of the current step. Does not own the gradient
// buffer (the model does) or the communicator (main does).
//
// Protocol per optimizer step:
//   agree_at_step_boundary(step, stop)   all ranks, once, before the first micro-batch
//   for each micro-batch:
//     begin_micro_batch(last)            no_sync for all but the last
//     model.backward(.., on_grad_ready)  full buckets launch an async Avg all-reduce
//     finish_micro_batch()               waits for every bucket on the last one
//   -> gradients are averaged over the dp group; step the optimizer.
// Invariants: buckets launch strictly in index order on every rank (a bucket
// that fills early waits for its predecessors); a bucket's gradients are not
// touched between its launch and finish_micro_batch().
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/llama.h"
#include "parallel/grad_buckets.h"
#include "tensor/tensor.h"

namespace weft {

struct DataParallelOptions {
  double bucket_cap_mb = 25;    // MiB of fp32 gradients per bucket
  double first_bucket_mb = 0;   // 0 = bucket_cap_mb
  bool overlap = true;          // false: launch all buckets after backward (baseline)
  bool bf16_wire = false;       // all-reduce a bf16 copy (halves bytes on the wire)
};

// Communication accounting of one optimizer step (DESIGN.md "Metrics").
struct StepCommStats {
  double comm_seconds = 0;      // sum of the bucket all-reduces' run times
  double exposed_seconds = 0;   // time compute waited for them
  std::vector<double> bucket_seconds;  // run time per bucket
  double overlap_ratio() const {
    if (comm_seconds <= 0) return 0;
    double r = 1.0 - exposed_seconds / comm_seconds;
    return r < 0 ? 0 : (r > 1 ? 1 : r);
  }
};

// What the ranks agreed at a step boundary.
struct StepAgreement {
  bool stop = false;            // some rank was asked to stop: all stop here
  bool rebucketed = false;      // the bucket cap changed at this boundary
};

class DataParallel {
 public:
  DataParallel(const std::vector<ParamInfo>& params, Tensor flat_grads, comm::CommunicatorPtr dp,
               DataParallelOptions opt);

  // Collective: every rank calls it at the same step boundary. Combines the
  // ranks' stop requests and rank 0's pending bucket cap in one tiny
  // all-reduce; a new cap takes effect here, on every rank.
  StepAgreement agree_at_step_boundary(int64_t step, bool stop_requested);

  // Rank 0's request wins; other ranks' requests are ignored (the tuner
  // writes one value for the whole job). Applied at the next boundary.
  void request_bucket_cap(double cap_mb);

  void begin_micro_batch(bool sync);
  void on_grad_ready(int param);
  void finish_micro_batch();

  const std::vector<Bucket>& buckets() const { return buckets_; }
  double bucket_cap_mb() const { return opt_.bucket_cap_mb; }
  const StepCommStats& last_step() const { return stats_; }
  const comm::Communicator& group() const { return *dp_; }

 private:
  void rebuild(double cap_mb);
  void launch(int bucket);
  void launch_ready_in_order();

  std::vector<ParamInfo> params_;
  Tensor grads_;
  comm::CommunicatorPtr dp_;
  DataParallelOptions opt_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_param_;
  std::vector<int> pending_;          // params not yet ready, per bucket
  std::vector<comm::WorkPtr> works_;  // per bucket, this micro-batch
  std::vector<uint16_t> wire_;        // bf16 staging, same layout as grads
  int next_launch_ = 0;
  bool sync_ = true;
  double requested_cap_mb_ = 0;
  StepCommStats stats_;
};

}  // namespace weft
