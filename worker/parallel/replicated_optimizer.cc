#include "parallel/replicated_optimizer.h"

#include <cmath>
#include <utility>

namespace weft {

ReplicatedOptimizer::ReplicatedOptimizer(std::shared_ptr<ParamAndGradBuffer> buffer, const OptimConfig& optim,
                                         bool writer)
    : buf_(std::move(buffer)),
      opt_(optim, default_param_ranges(buf_->params(), optim), buf_->device(),
           /*master_weights=*/buf_->param_dtype() != DType::F32),
      writer_(writer) {}

void ReplicatedOptimizer::load_full_weights(const ParamAndGradBuffer& full) {
  load_replicated_weights(*buf_, opt_, full);
}

void ReplicatedOptimizer::gather_full_weights(ParamAndGradBuffer& full) {
  buf_->store_params(full.flat_params());
  opt_.store_master(full.flat_params());
}

double ReplicatedOptimizer::clip_and_step(double lr, double max_norm, const NormScope& scope) {
  double norm;
  if (!scope.active()) {
    norm = std::sqrt(ops::sum_squares(buf_->flat_grads()));
  } else {
    double sumsq = 0;
    for (size_t i = 0; i < buf_->params().size(); ++i)
      sumsq += scope.weight(static_cast<int>(i)) * ops::sum_squares(buf_->grad(static_cast<int>(i)));
    norm = std::sqrt(scope.reduce(sumsq));
  }
  // The clip coefficient is applied as AdamW reads the gradients (the same
  // f32 products as scaling them first, without a pass over the buffer); the
  // buffer keeps the unclipped gradients.
  opt_.step(buf_->flat_params(), buf_->flat_grads(), lr, static_cast<float>(clip_coefficient(norm, max_norm)));
  return norm;
}

StateBytes ReplicatedOptimizer::state_bytes() const {
  return {static_cast<int64_t>(buf_->param_bytes()), static_cast<int64_t>(buf_->grad_bytes()), opt_.state_bytes(),
          {}};
}

}  // namespace weft
