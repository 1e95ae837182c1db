// Bucketed data parallelism: gradient all-reduce overlapped with backward
// (as PyTorch DDP does), as a GradSync.
//
// Composed of the bucketed reducer (BucketReducer: the bucket layout,
// readiness, launches and in-flight reductions, an Avg all-reduce per
// bucket, the step's accounting) and the replicated optimizer placement
// (ReplicatedOptimizer, its StrategyState), both members.
// Shares the parameter/gradient buffer with the model; does not own the
// communicator's process (main does).
//
// Per micro-batch: begin_micro_batch(last) (no_sync for all but the last),
// backward calls on_grad_ready and full buckets launch an async Avg
// all-reduce, finish_micro_batch() waits for every bucket on the last one.
// Invariants: buckets launch strictly in index order on every rank (a bucket
// that fills early waits for its predecessors); a bucket's gradients are not
// touched between its launch and finish_micro_batch().
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "parallel/bucket_reducer.h"
#include "parallel/grad_buckets.h"
#include "parallel/replicated_optimizer.h"
#include "tensor/tensor.h"

namespace weft {

struct DataParallelOptions {
  BucketEngineOptions buckets;  // bucket_options(ParallelConfig)
  bool overlap = true;          // false: launch all buckets after backward (baseline)
};
// The parallel section's bucket, overlap and wire settings.
DataParallelOptions data_parallel_options(const ParallelConfig& p);

class DataParallel : public GradSync {
 public:
  DataParallel(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr dp,
               DataParallelOptions opt, const OptimConfig& optim);

  void start() override { reducer_.broadcast_parameters(); }
  void begin_micro_batch(bool last) override;
  void on_grad_ready(int param) override;
  double finish_micro_batch(double loss) override;
  double clip_and_step(double lr, double max_norm) override {
    return optimizer_.clip_and_step(lr, max_norm, norm_scope());
  }
  void rebucket(double cap_mb, int64_t step) override;
  const std::vector<Bucket>& buckets() const { return reducer_.engine().buckets(); }

 private:
  SyncReport make_report(bool describe) const override;
  // Waits for every bucket of the last micro-batch, in order.
  void wait_buckets();

  DataParallelOptions opt_dp_;
  BucketReducer reducer_;
  ReplicatedOptimizer optimizer_;
  bool sync_ = true;
};

}  // namespace weft
