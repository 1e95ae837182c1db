#include "tuner/trial_window.h"

#include <algorithm>
#include <cmath>

#include "weft_metrics.h"

namespace weft::tuner {

namespace cm = contract::metrics;

std::optional<RankSample> read_rank_sample(const scrape::Exposition& e) {
  auto step = e.sum(cm::kStep.name);
  auto cap = e.sum(cm::kBucketCapBytes.name);
  auto sum = e.sum(cm::kStepSecondsSum);
  auto count = e.sum(cm::kStepSecondsCount);
  if (!step || !cap || !sum || !count) return std::nullopt;
  return RankSample{*step, *cap, *sum, *count, e.sum(cm::kExposedCommSeconds.name).value_or(0)};
}

bool reports_cap(double cap_bytes, double mb) {
  const double want = std::floor(static_cast<double>(static_cast<float>(mb)) * 1024 * 1024);
  return std::abs(cap_bytes - want) <= 1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void TrialWindow::add(const std::vector<RankSample>& samples) {
  if (static_cast<int>(samples.size()) != ranks_) return;
  bool all_on_cap = true;
  for (const RankSample& s : samples) all_on_cap = all_on_cap && reports_cap(s.cap_bytes, bucket_mb_);
  auto close = [&] {
    base_.clear();
    last_.clear();
    step_seconds_.clear();
    exposed_seconds_.clear();
  };
  if (!all_on_cap) return close();
  if (!open()) {
    base_ = last_ = samples;
    return;
  }
  double step_sum = 0, exposed_sum = 0;
  int counted = 0;
  for (int r = 0; r < ranks_; ++r) {
    const RankSample &a = last_[r], &b = samples[r];
    if (b.step < a.step || b.step_seconds_count < a.step_seconds_count || b.step_seconds_sum < a.step_seconds_sum)
      return close();  // a restarted rank: its counters began again
    const double n = b.step_seconds_count - a.step_seconds_count;
    if (n <= 0) continue;
    step_sum += (b.step_seconds_sum - a.step_seconds_sum) / n;
    exposed_sum += std::max(0.0, b.exposed_seconds - a.exposed_seconds) / n;
    ++counted;
  }
  if (counted == 0) return;  // no rank finished a step since the last round
  step_seconds_.push_back(step_sum / counted);
  exposed_seconds_.push_back(exposed_sum / counted);
  last_ = samples;
}

long TrialWindow::steps() const {
  if (!open()) return 0;
  long steps = -1;
  for (int r = 0; r < ranks_; ++r) {
    const long s = std::lround(last_[r].step - base_[r].step);
    steps = steps < 0 ? s : std::min(steps, s);
  }
  return std::max(steps, 0L);
}

std::optional<double> TrialWindow::median_step_seconds() const {
  if (step_seconds_.empty()) return std::nullopt;
  return median(step_seconds_);
}

std::optional<double> TrialWindow::median_exposed_seconds() const {
  if (exposed_seconds_.empty()) return std::nullopt;
  return median(exposed_seconds_);
}

}  // namespace weft::tuner
