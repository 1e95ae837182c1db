// The bucket-size search: a pure function from the trials that completed so
// far to the next size to try, or to the final choice. No state of its own:
// the trials recorded in status.tuning are the whole memory, so an operator
// that restarts continues the same search. Sizes in MiB; lower score is
// better (the tuner scores a trial by its median step time).
// defines: SearchSpace, ScoredTrial, SearchStep, coarse_grid, next_search_step.
//
// The plan, replayed from the history on every call:
//  1. the start size (what the job runs before tuning; the reference that the
//     choice is never worse than, as measured);
//  2. a coarse log-scale sweep over [min_mb, max_mb], both bounds included,
//     skipping points within 15 % of a size already tried;
//  3. refinement rounds around the best size so far, halving the log step
//     each round (best / h and best * h, clamped to the bounds);
//     Proposed sizes are rounded to 4 significant digits (bounds exact).
//  4. done when a refinement round improves the best score by less than
//     min_improvement (relative), when the log step falls under 4 %, or when
//     max_trials trials have completed. The choice is the best trial, unless it
//     beats the start size by less than min_improvement: then the start
//     stays (a gain within the noise is no reason to move the job).
//  5. with confirm_rounds > 0, a final check before that choice: the start
//     and the two best other sizes of steps 1-4 are measured again,
//     confirm_rounds rounds of them back to back (the order rotated each
//     round), and the choice is made as in 4 on the medians of these new
//     trials alone. Steps 1-4 measure each size once at a different time, so
//     a machine whose speed drifts over minutes can rank them wrongly (and
//     the best of many single noisy trials is biased low); sizes measured
//     in alternation share the same drift. These trials come on top of
//     max_trials (3 x confirm_rounds at most).
#pragma once

#include <string>
#include <vector>

namespace weft::tuner {

struct SearchSpace {
  double min_mb = 1, max_mb = 256;  // 0 < min_mb <= max_mb
  double start_mb = 25;             // > 0; may lie outside the bounds (it is measured, never proposed again)
  int max_trials = 8;               // completed trials, the start's included; >= 1
  double min_improvement = 0.02;    // relative gain a refinement round must bring to go on
  int confirm_rounds = 0;           // rounds of the final check (step 5); 0: none
};

struct ScoredTrial {
  double bucket_mb = 0;
  double score = 0;  // lower is better
};

struct SearchStep {
  bool done = false;
  double bucket_mb = 0;  // the next size to try, or the choice when done
  std::string why;       // one line for events and logs
};

// The sweep points of step 2, ascending (one point when min_mb == max_mb).
// Their count leaves room for the start and one refinement round:
// clamp(ceil(log4(max/min)) + 1, 2, max_trials - 3).
std::vector<double> coarse_grid(const SearchSpace& space);

// `completed`: the trials that finished, in the order they ran (the first is
// the start size). With none, the answer is to try the start size.
SearchStep next_search_step(const SearchSpace& space, const std::vector<ScoredTrial>& completed);

}  // namespace weft::tuner
