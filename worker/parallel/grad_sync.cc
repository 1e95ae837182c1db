#include "parallel/grad_sync.h"

#include <algorithm>
#include <cmath>

#include "parallel/host_scalars.h"


namespace weft {

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

void load_replicated_weights(ParamAndGradBuffer& buffer, AdamW& opt, const ParamAndGradBuffer& full) {
  buffer.load_params(full.flat_params());
  opt.load_master(full.flat_params());
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
