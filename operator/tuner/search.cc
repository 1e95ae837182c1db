#include "tuner/search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

namespace weft::tuner {
namespace {

// Two sizes closer than this factor measure the same thing.
constexpr double kSameGridPoint = 1.15;
constexpr double kSameRefinePoint = 1.03;
// A refinement step under this factor is below what a trial can resolve.
constexpr double kFinestStep = 1.04;

// Sizes are written to a ConfigMap and read by people: 4 significant digits
// are far finer than any trial can tell apart.
double round4(double mb) {
  if (!(mb > 0)) return mb;
  const double scale = std::pow(10.0, 3 - std::floor(std::log10(mb)));
  return std::round(mb * scale) / scale;
}

bool close(double a, double b, double factor) { return std::abs(std::log(a / b)) < std::log(factor); }

std::string fmt(const char* f, double a, double b = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

// The best of `trials` (earliest on ties); trials is never empty here.
const ScoredTrial& best_of(const std::vector<ScoredTrial>& trials) {
  const ScoredTrial* best = &trials.front();
  for (const ScoredTrial& t : trials)
    if (t.score < best->score) best = &t;
  return *best;
}

// Walks the plan over the history: each proposal either matches the next
// completed trial (the history followed the plan) or is the answer.
class Replay {
 public:
  Replay(const SearchSpace& space, const std::vector<ScoredTrial>& completed) : space_(space), completed_(completed) {}

  // nullopt: the proposal is skipped or already ran; go on with the plan.
  std::optional<SearchStep> propose(double mb, double same_factor, const char* why) {
    for (const ScoredTrial& t : seen_)
      if (close(t.bucket_mb, mb, same_factor)) return std::nullopt;
    // The search's own budget; final-check trials (after it) do not count.
    if (static_cast<int>(next_) >= space_.max_trials) return done("maxTrials reached");
    if (next_ < completed_.size()) {
      seen_.push_back(completed_[next_++]);
      return std::nullopt;
    }
    return SearchStep{false, mb, why};
  }

  // The search is over: the final check's next trial, or the choice.
  SearchStep done(const std::string& why) const {
    if (seen_.empty()) return SearchStep{true, space_.start_mb, why};
    std::vector<ScoredTrial> scores = seen_;
    std::string how = why;
    const std::vector<double> candidates = space_.confirm_rounds > 0 ? final_check_sizes() : std::vector<double>{};
    if (candidates.size() >= 2) {
      // Round r visits the candidates rotated by r; the i-th trial after the
      // search is the i-th visit.
      std::vector<double> visits;
      for (int r = 0; r < space_.confirm_rounds; ++r)
        for (size_t i = 0; i < candidates.size(); ++i) visits.push_back(candidates[(i + r) % candidates.size()]);
      const size_t checked = completed_.size() - next_;
      if (checked < visits.size())
        return SearchStep{false, visits[checked],
                          fmt("final check, round %.0f of %.0f", static_cast<double>(checked / candidates.size() + 1),
                              static_cast<double>(space_.confirm_rounds))};
      scores.clear();  // the choice rests on the check alone: median per size, start first
      for (double mb : candidates) {
        std::vector<double> s;
        for (size_t i = 0; i < visits.size(); ++i)
          if (visits[i] == mb) s.push_back(completed_[next_ + i].score);
        std::sort(s.begin(), s.end());
        const size_t n = s.size();
        scores.push_back({mb, n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2});
      }
      how += fmt("; final check of %.0f sizes over %.0f rounds", static_cast<double>(candidates.size()),
                 static_cast<double>(space_.confirm_rounds));
    }
    const ScoredTrial& best = best_of(scores);
    // A gain within the noise is no reason to move the job off its own size.
    const ScoredTrial& start = scores.front();
    if (best.score > start.score * (1 - space_.min_improvement))
      return SearchStep{true, start.bucket_mb,
                        how + fmt("; kept the start size: the best (%.4g MiB) gains under the threshold", best.bucket_mb)};
    return SearchStep{true, best.bucket_mb, how + fmt("; best %.4g MiB", best.bucket_mb)};
  }

  const std::vector<ScoredTrial>& seen() const { return seen_; }

 private:
  // The start, then the two best other sizes of the search (best first).
  std::vector<double> final_check_sizes() const {
    std::vector<ScoredTrial> others(seen_.begin() + 1, seen_.end());
    std::stable_sort(others.begin(), others.end(),
                     [](const ScoredTrial& a, const ScoredTrial& b) { return a.score < b.score; });
    std::vector<double> sizes{seen_.front().bucket_mb};
    for (const ScoredTrial& t : others)
      if (sizes.size() < 3 && t.bucket_mb != sizes.front()) sizes.push_back(t.bucket_mb);
    return sizes;
  }

  const SearchSpace& space_;
  const std::vector<ScoredTrial>& completed_;
  std::vector<ScoredTrial> seen_;
  size_t next_ = 0;
};

}  // namespace

std::vector<double> coarse_grid(const SearchSpace& s) {
  if (!(s.max_mb > s.min_mb)) return {s.min_mb};
  const double span = std::log(s.max_mb / s.min_mb);
  int n = static_cast<int>(std::ceil(span / std::log(4.0) - 1e-9)) + 1;
  n = std::clamp(n, 2, std::max(2, s.max_trials - 3));
  std::vector<double> grid;
  for (int i = 0; i < n; ++i) grid.push_back(round4(s.min_mb * std::exp(span * i / (n - 1))));
  grid.front() = s.min_mb;  // exactly the bounds, not roundings of them
  grid.back() = s.max_mb;
  return grid;
}

SearchStep next_search_step(const SearchSpace& space, const std::vector<ScoredTrial>& completed) {
  Replay plan(space, completed);
  if (auto s = plan.propose(space.start_mb, 1.0, "the start size: the reference")) return *s;
  const std::vector<double> grid = coarse_grid(space);
  for (double g : grid)
    if (auto s = plan.propose(g, kSameGridPoint, "coarse sweep")) return *s;
  if (grid.size() < 2) return plan.done("one size within the bounds");

  double h = std::pow(space.max_mb / space.min_mb, 1.0 / (grid.size() - 1));
  for (;;) {
    h = std::sqrt(h);
    if (h < kFinestStep) return plan.done("refined to the finest step");
    const ScoredTrial before = best_of(plan.seen());
    const double lo = std::max(space.min_mb, round4(before.bucket_mb / h));
    const double hi = std::min(space.max_mb, round4(before.bucket_mb * h));
    if (auto s = plan.propose(lo, kSameRefinePoint, "refine below the best")) return *s;
    if (auto s = plan.propose(hi, kSameRefinePoint, "refine above the best")) return *s;
    const ScoredTrial after = best_of(plan.seen());
    const double gain = (before.score - after.score) / before.score;
    if (gain < space.min_improvement)
      return plan.done(fmt("refinement gained %.2f %% (< %.2f %%)", 100 * gain, 100 * space.min_improvement));
  }
}

}  // namespace weft::tuner
