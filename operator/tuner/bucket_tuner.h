// BucketTuner: the bucket-size tuning policy the reconciler calls once per
// reconcile of a running job with spec.tuning.bucketSize.enabled. It scrapes
// every rank's /metrics, feeds the current trial's window, and when a trial
// completes asks the search (search.h) for the next size or the choice. It
// returns what the reconciler applies: the next status.tuning, the value to
// write into the ConfigMap key the workers poll (contract::kBucketCapKey),
// events, and when to look again. It never touches pods or the API itself.
//
// Invariants:
//  - status.tuning is the memory: trials with scores are final, and the
//    search replays them, so an operator restart continues the same search.
//    Only the open trial's window lives in this object; after a restart, a
//    new gang attempt, or a rank that left the cap, it is measured afresh.
//  - The last trial without a score is the one under way, and
//    currentBucketMB is its size while Searching.
//  - The choice is the best-scored trial, the start size included, so tuning
//    never leaves a job slower than it started, as measured.
//  - One reconcile at a time per job (the work queue guarantees it); windows
//    of different jobs are kept under a mutex.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "scrape/http_scraper.h"
#include "trainingjob/types.h"
#include "tuner/trial_window.h"
#include "tuner/tuner_metrics.h"

namespace weft::tuner {

// Event reasons (kubectl describe tj).
inline constexpr const char* kReasonTuningStarted = "TuningStarted";
inline constexpr const char* kReasonTrialStarted = "TuningTrialStarted";
inline constexpr const char* kReasonTrialCompleted = "TuningTrialCompleted";
inline constexpr const char* kReasonConverged = "TuningConverged";
inline constexpr const char* kReasonStopped = "TuningStopped";

struct RankEndpoint {
  int rank = 0;
  std::string ip;  // status.podIP
};

struct TuneRequest {
  std::string ns, name, uid;
  int attempt = 0;                    // status.attempt: a new gang measures afresh
  tj::BucketTuningSpec tuning;        // spec.tuning.bucketSize (enabled)
  // The job's own size, spec.worker parallel.bucket_cap_mb; 0 when it is
  // auto: the tuner starts from the size rank 0 reports (weft_bucket_cap_bytes).
  double start_mb = 25;
  int replicas = 1;
  int metrics_port = 9400;
  std::vector<RankEndpoint> ranks;    // the current attempt's running pods with an IP
  std::optional<tj::TuningStatus> status;
};

struct TuneEvent {
  std::string type, reason, message;
};

struct TuneResult {
  std::optional<tj::TuningStatus> status;  // the next status.tuning (unset: leave it)
  std::optional<double> write_mb;          // write this into the ConfigMap key
  std::vector<TuneEvent> events;
  std::optional<std::chrono::milliseconds> requeue_after;  // look again (set while searching)
};

using ScrapeFn = std::function<scrape::ScrapeResult(const scrape::Endpoint&)>;

struct TunerOptions {
  std::chrono::milliseconds poll{2000};  // between scrapes while a trial runs
  double min_improvement = 0.02;         // search.h SearchSpace::min_improvement
};

class BucketTuner {
 public:
  // scrape: how to read one rank (tests inject canned expositions).
  // metrics: may be null.
  explicit BucketTuner(TunerMetrics* metrics = nullptr, ScrapeFn scrape = {}, TunerOptions opts = {});

  TuneResult tune(const TuneRequest& req);
  // Drops the open window of a job that is gone or finished.
  void forget(const std::string& uid);

 private:
  struct Open {  // the open trial of one job
    int attempt = 0;
    size_t trial = 0;  // index into status.tuning.trials
    std::shared_ptr<TrialWindow> window;
  };
  std::shared_ptr<TrialWindow> window_for(const TuneRequest& req, size_t trial, double mb);
  // The cap rank 0 reports, in MiB; nullopt until it reports one.
  std::optional<double> reported_start_mb(const TuneRequest& req);

  TunerMetrics* metrics_;
  ScrapeFn scrape_;
  TunerOptions opts_;
  std::mutex mu_;
  std::map<std::string, Open> open_;  // by job uid
};

// The ConfigMap text for a size: the shortest decimal that reads back as the
// same double.
std::string format_mb(double mb);

}  // namespace weft::tuner
