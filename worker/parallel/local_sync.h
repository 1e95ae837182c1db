// One rank: nothing to synchronise; the replicated optimizer owns every
// parameter. The GradSync of a one-rank run, and of ISP's shards when no other
// rank holds the same shard.
#pragma once

#include <memory>
#include <string>

#include "parallel/grad_sync.h"
#include "parallel/replicated_optimizer.h"

namespace weft {

class LocalGradSync : public GradSync {
 public:
  LocalGradSync(std::shared_ptr<ParamAndGradBuffer> buffer, const OptimConfig& optim)
      : GradSync(optimizer_), optimizer_(std::move(buffer), optim, /*writer=*/true) {}

  void start() override {}  // one rank: its parameters are everyone's
  void begin_micro_batch(bool) override {}
  void on_grad_ready(int) override {}
  double finish_micro_batch(double loss) override { return loss; }
  double clip_and_step(double lr, double max_norm) override {
    return optimizer_.clip_and_step(lr, max_norm, norm_scope());
  }

 private:
  SyncReport make_report(bool describe) const override {
    SyncReport r;
    r.last_step = &stats_;
    r.memory = optimizer_.state_bytes();
    if (describe) r.description = "one rank, no gradient sync";
    return r;
  }
  ReplicatedOptimizer optimizer_;
  StepCommStats stats_;
};

}  // namespace weft
