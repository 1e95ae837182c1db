// The phases of one training step, each measured (docs/metrics.md, "The
// phases of a step"): one clock that laps, so every instant from the step's
// start to its end falls in exactly one lap, and each lap is booked to the
// phase it ran. A lap counts its wall time less the waits for communication
// inside it (ops::host_wait_seconds_of_this_thread), which are the
// strategy's exposed comm, reported by the strategy as a phase of its own.
// Invariant: data + forward + backward + optimizer + other + the waits taken
// out == the step's wall time; the phases sum to it exactly when the
// strategy's exposed comm is the waits taken out (a check of both, per step:
// phase_sum_tolerance).
#pragma once

#include <chrono>
#include <cmath>
#include <string>

#include "kernels/stream_timer.h"

namespace weft {

struct StepPhases {
  double data = 0, forward = 0, backward = 0, optimizer = 0;
  double exposed_comm = 0;  // the strategy's report, not a lap
  double other = 0;         // step agreement, prepare_step, zeroing gradients, the loss all-reduce, device finish
  double sum() const { return data + forward + backward + optimizer + exposed_comm + other; }
};

// How far the phases of a step may be from its wall time before the step
// counts as misaccounted: 0.5 ms plus 1% of the step. The laps share their
// clock reads, so a loaded host moves time between phases, never out of
// them; what remains is the strategy's clock reads of its waits.
inline double phase_sum_tolerance(double step_seconds) { return 0.5e-3 + 0.01 * step_seconds; }

class StepClock {
 public:
  using Clock = std::chrono::steady_clock;
  StepClock() : start_(Clock::now()), lap_start_(start_), waited_(ops::host_wait_seconds_of_this_thread()) {}

  // Ends the current lap now, booked to `phase`; the next lap starts now.
  void lap(double StepPhases::*phase) {
    const Clock::time_point now = Clock::now();
    const double waited = ops::host_wait_seconds_of_this_thread();
    phases_.*phase += std::chrono::duration<double>(now - lap_start_).count() - (waited - waited_);
    lap_start_ = now;
    waited_ = waited;
  }
  // From the step's start to the end of the last lap.
  double seconds() const { return std::chrono::duration<double>(lap_start_ - start_).count(); }
  const StepPhases& phases() const { return phases_; }

 private:
  Clock::time_point start_, lap_start_;
  double waited_;
  StepPhases phases_;
};

}  // namespace weft
