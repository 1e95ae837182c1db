// weft_operator_tuner_* metrics. Built once on the operator's registry (the
// caller owns it); per-job series carry the labels namespace and trainingjob
// (the TrainingJob's name; `job` stays the scraper's) and are removed when the
// tuner forgets the job.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace weft::tuner {

class TunerMetrics {
 public:
  explicit TunerMetrics(prometheus::Registry& registry);

  // A trial finished: its size and median step time.
  void trial_completed(const std::string& ns, const std::string& job, double bucket_mb, double step_seconds);
  // What the ConfigMap holds now, and whether the search has converged.
  // Also creates the job's trial counter at 0, so its first trial is an
  // increase Prometheus sees.
  void set_bucket(const std::string& ns, const std::string& job, double bucket_mb, bool converged);
  void scrape_failed() { scrape_errors_.Increment(); }
  // The job is gone (deleted): its series are removed, so dashboards stop
  // listing it and its namespace.
  void forget(const std::string& ns, const std::string& job);

 private:
  prometheus::Family<prometheus::Counter>& trials_;
  prometheus::Family<prometheus::Gauge>& trial_step_seconds_;
  prometheus::Family<prometheus::Gauge>& bucket_mb_;
  prometheus::Family<prometheus::Gauge>& converged_;
  prometheus::Counter& scrape_errors_;
  std::mutex mu_;  // the reconcile workers call in concurrently
  std::map<std::pair<std::string, std::string>, std::set<std::string>> trial_sizes_;  // (ns, job) -> bucket_mb labels
};

}  // namespace weft::tuner
