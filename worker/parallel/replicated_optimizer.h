// ReplicatedOptimizer: the optimizer placement of the replicated strategies
// (one rank, bucketed data parallelism): AdamW over every parameter of the
// buffer, with an fp32 master copy when the working weights are not f32,
// identical on every rank. It is those strategies' StrategyState: checkpoints
// and initial weights reach the optimizer through it, and one rank (`writer`)
// writes the state for all. The strategy decides when the gradients are
// ready; clip_and_step does the rest of the step.
#pragma once

#include <memory>

#include "model/param_and_grad_buffer.h"
#include "optim/adamw.h"
#include "parallel/grad_sync.h"
#include "parallel/sync_state.h"

namespace weft {

class ReplicatedOptimizer : public StrategyState {
 public:
  ReplicatedOptimizer(std::shared_ptr<ParamAndGradBuffer> buffer, const OptimConfig& optim, bool writer);

  AdamW& optimizer() override { return opt_; }
  bool writes_optimizer_state() const override { return writer_; }
  void load_full_weights(const ParamAndGradBuffer& full) override;
  void gather_full_weights(ParamAndGradBuffer& full) override;

  // The global gradient norm over the whole gradient buffer (widened by
  // `scope`), then one AdamW step with the gradients clipped to max_norm as it
  // reads them (the buffer keeps the unclipped gradients). Returns the norm.
  double clip_and_step(double lr, double max_norm, const NormScope& scope);
  // Parameters, gradients and optimizer state, all replicated.
  StateBytes state_bytes() const;

 private:
  std::shared_ptr<ParamAndGradBuffer> buf_;
  AdamW opt_;
  bool writer_;
};

}  // namespace weft
