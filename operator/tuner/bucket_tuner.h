// The bucket-size tuning policy: a pure function the reconciler calls once
// per reconcile of a running job with spec.tuning.bucketSize.enabled. From
// the job's status.tuning, the samples the reconciler scraped from its ranks
// (its observe step), the spec and the open trial's window, it decides: the
// next status.tuning, the value to write into the ConfigMap key the workers
// poll (contract::kBucketCapKey), events, metrics to record, when to look
// again, and the window to keep for the next call. It does no I/O: no
// scrapes, no API calls, no logging; the reconciler applies the decision.
// When a trial completes it asks the search (search.h) for the next size or
// the choice.
//
// Invariants:
//  - status.tuning is the memory: trials with scores are final, and the
//    search replays them, so an operator restart continues the same search.
//    Only the open trial's window is carried between calls (the caller keeps
//    it in memory); after a restart, a new gang attempt, or a rank that left
//    the cap, it is measured afresh.
//  - The last trial without a score is the one under way, and
//    currentBucketMB is its size while Searching.
//  - The choice is the best-scored trial, the start size included, so tuning
//    never leaves a job slower than it started, as measured.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tuner/trial_window.h"
#include "tuning/types.h"

namespace weft::tuner {

// Event reasons (kubectl describe tj).
inline constexpr const char* kReasonTuningStarted = "TuningStarted";
inline constexpr const char* kReasonTrialStarted = "TuningTrialStarted";
inline constexpr const char* kReasonTrialCompleted = "TuningTrialCompleted";
inline constexpr const char* kReasonConverged = "TuningConverged";
inline constexpr const char* kReasonStopped = "TuningStopped";

// What the observe step read from one running rank of the current attempt.
struct RankObservation {
  int rank = 0;
  std::optional<RankSample> sample;  // unset: the scrape failed or lacked a family the tuner needs
  std::string error;                 // why `sample` is unset (for the debug log)
};

struct TuneRequest {
  std::string ns, name;
  int attempt = 0;                    // status.attempt: a new gang measures afresh
  tuning::BucketTuningSpec tuning;    // spec.tuning.bucketSize (enabled)
  // The job's own size, spec.worker parallel.bucket_cap_mb; 0 when it is
  // auto: the tuner starts from the size rank 0 reports (weft_bucket_cap_bytes).
  double start_mb = 25;
  int replicas = 1;
  // The current attempt's running ranks with an IP, as scraped this
  // reconcile (see needs_samples). A round counts only when every rank of
  // 0..replicas-1 is here with a sample.
  std::vector<RankObservation> ranks;
  std::optional<tuning::TuningStatus> status;
};

// The open trial's measurement window, carried from one call to the next.
struct OpenTrial {
  int attempt = 0;
  size_t trial = 0;  // index into status.tuning.trials
  TrialWindow window{0, 0};
};

struct TuneEvent {
  std::string type, reason, message;
};

struct CompletedTrial {
  double bucket_mb = 0;
  double median_step_seconds = 0;
};

struct TuneDecision {
  std::optional<tuning::TuningStatus> status;  // the next status.tuning (unset: leave it)
  std::optional<double> write_mb;              // write this into the ConfigMap key
  std::vector<TuneEvent> events;
  std::optional<std::chrono::milliseconds> requeue_after;  // look again (set while searching)
  std::optional<OpenTrial> open;  // keep this window for the next call (unset: drop the job's window)
  // For the tuner's metrics (tuner_metrics.h):
  std::optional<CompletedTrial> completed;  // a trial finished in this call
  bool scrape_failed = false;               // a rank's sample was missing, the round did not count
};

struct TunerOptions {
  std::chrono::milliseconds poll{2000};  // between scrapes while a trial runs
  double min_improvement = 0.02;         // search.h SearchSpace::min_improvement
};

// Whether a call of decide_tuning with this status.tuning reads the ranks'
// samples: true until tuning has started and while it searches.
bool needs_samples(const std::optional<tuning::TuningStatus>& status);

// The decision. `open`: the window the previous call returned for this job
// (nullptr after an operator restart or for a new job).
TuneDecision decide_tuning(const TuneRequest& req, const OpenTrial* open, const TunerOptions& opts = {});

// The ConfigMap text for a size: the shortest decimal that reads back as the
// same double.
std::string format_mb(double mb);

}  // namespace weft::tuner
