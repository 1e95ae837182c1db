#include "trainingjob/straggler_policy.h"

#include <algorithm>
#include <map>

#include "weft_metrics.h"

namespace weft::tj {

namespace cm = contract::metrics;

std::optional<PaceSample> read_pace(int rank, const scrape::Exposition& e) {
  const auto step = e.sum(cm::kStep.name), compute = e.sum(cm::kComputeSeconds.name),
             wait = e.sum(cm::kWaitSeconds.name);
  if (!step || !compute || !wait) return std::nullopt;
  return PaceSample{rank, *step, *compute, *wait};
}

namespace {

// The fewest steps any rank advanced from `base` to `last`; -1 when the two
// rounds are not of the same ranks.
double steps_between(const PaceRound& base, const PaceRound& last) {
  if (base.ranks.size() != last.ranks.size()) return -1;
  double fewest = -1;
  for (size_t i = 0; i < last.ranks.size(); ++i) {
    if (base.ranks[i].rank != last.ranks[i].rank) return -1;
    const double d = last.ranks[i].step - base.ranks[i].step;
    fewest = fewest < 0 ? d : std::min(fewest, d);
  }
  return fewest;
}

}  // namespace

StragglerVerdict judge_stragglers(const std::deque<PaceRound>& rounds, const StragglerSpec& spec) {
  StragglerVerdict v;
  if (rounds.size() < 2 || rounds.back().ranks.size() < 2) return v;
  const PaceRound& last = rounds.back();
  const PaceRound* base = nullptr;
  double steps = 0;
  // The window starts at the oldest round of the ranks of the last one: a
  // round taken while some pods had no IP yet holds fewer ranks, and were it
  // the start, no window would ever be judged (it stays for 512 rounds).
  size_t from = 0;
  while (from + 1 < rounds.size() && steps_between(rounds[from], last) < 0) ++from;
  // The first windowSteps steps of the window are not compared: an
  // attempt's first steps (allocation, first touch of memory, ranks that
  // joined late) are slow for reasons that pass.
  const PaceRound& first = rounds[from];
  for (size_t i = rounds.size() - 1; i-- > from + 1;) {
    const PaceRound& candidate = rounds[i];
    if (steps_between(first, candidate) < spec.window_steps) continue;
    const double d = steps_between(candidate, last);
    if (d >= spec.window_steps) {
      base = &candidate;
      steps = d;
      break;
    }
  }
  if (!base) return v;
  std::vector<double> compute;
  for (size_t i = 0; i < last.ranks.size(); ++i) {
    const PaceSample &a = base->ranks[i], &b = last.ranks[i];
    const double n = b.step - a.step;
    RankPace p{b.rank, std::max(0.0, b.compute - a.compute) / n, std::max(0.0, b.wait - a.wait) / n};
    v.ranks.push_back(p);
    compute.push_back(p.compute_per_step);
  }
  std::sort(compute.begin(), compute.end());
  v.median_compute = compute[(compute.size() - 1) / 2];
  v.judged = true;
  v.steps = static_cast<int>(steps);
  std::sort(v.ranks.begin(), v.ranks.end(), [](const RankPace& x, const RankPace& y) { return x.rank < y.rank; });
  for (const RankPace& p : v.ranks) {
    if (v.median_compute <= 0 || p.compute_per_step <= v.median_compute * (1 + spec.threshold)) continue;
    if (!v.straggler || p.compute_per_step > v.straggler->compute_per_step) v.straggler = p;
  }
  if (v.straggler) v.ratio = v.straggler->compute_per_step / v.median_compute;
  return v;
}

}  // namespace weft::tj
