// Straggler policy (pure): which rank of a gang is slow. Every rank exports
// the seconds its steps computed and waited in collectives
// (weft_compute_seconds_total, weft_wait_seconds_total, with weft_step); the
// scrape poller reads every rank of a job with spec.stragglers each few
// seconds into a window of rounds. A rank is a straggler when its compute
// time per step over the last windowSteps steps exceeds the gang's median by
// more than the threshold: the rest of the gang then waits for it in every
// collective. The slowest such rank is named; with one rank nobody is.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "scrape/prom_text.h"
#include "trainingjob/clock.h"
#include "trainingjob/types.h"

namespace weft::tj {

// One rank's cumulative figures at a scrape.
struct PaceSample {
  int rank = 0;
  double step = 0;     // weft_step
  double compute = 0;  // weft_compute_seconds_total
  double wait = 0;     // weft_wait_seconds_total
};
// The figures, or nullopt when the rank does not export them (yet).
std::optional<PaceSample> read_pace(int rank, const scrape::Exposition& e);

// Every rank of one attempt, scraped in one pass.
struct PaceRound {
  TimePoint at;
  std::vector<PaceSample> ranks;
};

struct RankPace {
  int rank = 0;
  double compute_per_step = 0, wait_per_step = 0;
};

struct StragglerVerdict {
  bool judged = false;          // the window holds windowSteps steps of every rank
  int steps = 0;                // steps the judgement covers (the fewest of any rank)
  double median_compute = 0;    // the gang's median compute seconds per step (the lower middle of an even gang)
  std::vector<RankPace> ranks;  // by rank
  std::optional<RankPace> straggler;  // the slowest rank beyond the threshold
  double ratio = 0;             // its compute per step over the median
};

// Judges the latest round against the newest earlier one that is at least
// spec.window_steps steps behind on every rank and itself at least
// spec.window_steps steps past the window's first round: the first steps of
// an attempt are slow for reasons that pass, and not compared.
StragglerVerdict judge_stragglers(const std::deque<PaceRound>& rounds, const StragglerSpec& spec);

}  // namespace weft::tj
