// Bucketed data parallelism: gradient all-reduce overlapped with backward
// (as PyTorch DDP does), as a GradSync.
//
// Composed of the bucketed reducer (BucketedSync: the bucket layout,
// readiness, launches and in-flight reductions, an Avg all-reduce per
// bucket, the step's accounting) and the replicated optimizer placement
// (ReplicatedOptimizer, its StrategyState).
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
#include "parallel/bucketed_sync.h"
#include "parallel/grad_buckets.h"
#include "parallel/replicated_optimizer.h"
#include "tensor/tensor.h"

namespace weft {

struct DataParallelOptions {
  double bucket_cap_mb = 0;     // MiB of fp32 gradients per bucket; 0 = auto (resolve_bucket_sizing)
  double first_bucket_mb = 0;   // 0 = bucket_cap_mb, or the rule's first bucket when auto
  bool overlap = true;          // false: launch all buckets after backward (baseline)
  bool bf16_wire = false;       // all-reduce a bf16 copy (halves bytes on the wire)
  bool unsynced_for_tests = false;  // BucketEngineOptions::unsynced_for_tests
};
// The parallel section's bucket, overlap and wire settings.
DataParallelOptions data_parallel_options(const ParallelConfig& p);

class DataParallel : public BucketedSync {
 public:
  DataParallel(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr dp,
               DataParallelOptions opt, const OptimConfig& optim);

  StrategyState& state() override { return optimizer_; }
  void begin_micro_batch(bool last) override;
  void on_grad_ready(int param) override;
  double finish_micro_batch(double loss) override;
  double clip_and_step(double lr, double max_norm) override {
    return optimizer_.clip_and_step(lr, max_norm, norm_scope_);
  }
  void rebucket(double cap_mb, int64_t step) override;
  StateBytes state_bytes() const override { return optimizer_.state_bytes(); }
  std::string describe() const override;

 protected:
  // Called once per bucket, in bucket order, when its all-reduce for the
  // last micro-batch has completed.
  virtual void on_bucket_reduced(int bucket) { (void)bucket; }

 private:
  // Waits for every bucket of the last micro-batch, in order.
  void wait_buckets();

  DataParallelOptions opt_dp_;
  ReplicatedOptimizer optimizer_;
  bool sync_ = true;
};

}  // namespace weft
