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
      : optimizer_(std::move(buffer), optim, /*writer=*/true) {}

  StrategyState& state() override { return optimizer_; }
  void start() override {}  // one rank: its parameters are everyone's
  void begin_micro_batch(bool) override {}
  void on_grad_ready(int) override {}
  double finish_micro_batch(double loss) override { return loss; }
  double clip_and_step(double lr, double max_norm) override {
    return optimizer_.clip_and_step(lr, max_norm, norm_scope_);
  }
  const StepCommStats& last_step() const override { return stats_; }
  const comm::Communicator* group() const override { return nullptr; }
  StateBytes state_bytes() const override { return optimizer_.state_bytes(); }
  std::string describe() const override { return "one rank, no gradient sync"; }

 private:
  ReplicatedOptimizer optimizer_;
  StepCommStats stats_;
};

}  // namespace weft
