#include "parallel/grad_sync.h"

#include <algorithm>
#include <cmath>

#include "parallel/host_scalars.h"


namespace weft {

AdamW replicated_adamw(const ParamAndGradBuffer& buffer, const OptimConfig& optim) {
  return AdamW(optim, default_param_ranges(buffer.params(), optim), buffer.device(),
               /*master_weights=*/buffer.param_dtype() != DType::F32);
}

double NormScope::weight(int param) const {
  if (!active() || param >= static_cast<int>(replicated.size()) || !replicated[param]) return 1.0;
  return 1.0 / across->size();
}

double NormScope::reduce(double sumsq) const {
  if (!active()) return sumsq;
  float wire = static_cast<float>(sumsq);
  all_reduce_host(*across, device, &wire, 1, comm::ReduceOp::Sum, "grad norm")->wait();
  return wire;
}

double clip_and_step_replicated(ParamAndGradBuffer& buffer, AdamW& opt, double lr, double max_norm,
                                const NormScope& scope) {
  double norm;
  if (!scope.active()) {
    norm = std::sqrt(ops::sum_squares(buffer.flat_grads()));
  } else {
    double sumsq = 0;
    for (size_t i = 0; i < buffer.params().size(); ++i)
      sumsq += scope.weight(static_cast<int>(i)) * ops::sum_squares(buffer.grad(static_cast<int>(i)));
    norm = std::sqrt(scope.reduce(sumsq));
  }
  // The clip coefficient is applied as AdamW reads the gradients (the same
  // f32 products as scaling them first, without a pass over the buffer); the
  // buffer keeps the unclipped gradients.
  opt.step(buffer.flat_params(), buffer.flat_grads(), lr,
           static_cast<float>(clip_coefficient(norm, max_norm)));
  return norm;
}

LocalGradSync::LocalGradSync(std::shared_ptr<ParamAndGradBuffer> buffer, const OptimConfig& optim)
    : buf_(std::move(buffer)), opt_(replicated_adamw(*buf_, optim)) {}

void load_replicated_weights(ParamAndGradBuffer& buffer, AdamW& opt, const ParamAndGradBuffer& full) {
  buffer.load_params(full.flat_params());
  opt.load_master(full.flat_params());
}

void store_replicated_weights(const ParamAndGradBuffer& buffer, const AdamW& opt, ParamAndGradBuffer& full) {
  buffer.store_params(full.flat_params());
  opt.store_master(full.flat_params());
}

void LocalGradSync::load_full_weights(const ParamAndGradBuffer& full) { load_replicated_weights(*buf_, opt_, full); }

void LocalGradSync::gather_full_weights(ParamAndGradBuffer& full) { store_replicated_weights(*buf_, opt_, full); }

double LocalGradSync::clip_and_step(double lr, double max_norm) {
  return clip_and_step_replicated(*buf_, opt_, lr, max_norm, norm_scope_);
}

StateBytes LocalGradSync::state_bytes() const {
  return {static_cast<int64_t>(buf_->param_bytes()), static_cast<int64_t>(buf_->grad_bytes()),
          opt_.state_bytes()};
}

void CommSpans::add(Clock::time_point issued, comm::Work& w) {
  const double start = std::chrono::duration<double>(issued - epoch_).count() + w.enqueue_to_start_seconds();
  spans_.emplace_back(start, start + w.comm_seconds());
}

void CommSpans::add(const CommSpans& other) {
  const double shift = std::chrono::duration<double>(other.epoch_ - epoch_).count();
  for (const auto& [a, b] : other.spans_) spans_.emplace_back(a + shift, b + shift);
}

std::vector<std::pair<CommSpans::Clock::time_point, CommSpans::Clock::time_point>> CommSpans::intervals() const {
  std::vector<std::pair<Clock::time_point, Clock::time_point>> out;
  auto at = [this](double s) {
    return epoch_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  for (const auto& [a, b] : spans_) out.emplace_back(at(a), at(b));
  return out;
}

double CommSpans::busy_seconds() const {
  std::vector<std::pair<double, double>> s = spans_;
  std::sort(s.begin(), s.end());
  double total = 0, open = 0, close = 0;
  bool any = false;
  for (const auto& [a, b] : s) {
    if (!any || a > close) {
      if (any) total += close - open;
      open = a;
      close = b;
      any = true;
    } else {
      close = std::max(close, b);
    }
  }
  if (any) total += close - open;
  return total;
}

}  // namespace weft
