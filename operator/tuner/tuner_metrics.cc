#include "tuner/tuner_metrics.h"

#include <cstdio>

namespace weft::tuner {

TunerMetrics::TunerMetrics(prometheus::Registry& registry)
    : trials_(prometheus::BuildCounter()
                  .Name("weft_operator_tuner_trials_total")
                  .Help("Bucket-size trials the tuner completed, per job")
                  .Register(registry)),
      trial_step_seconds_(prometheus::BuildGauge()
                              .Name("weft_operator_tuner_trial_step_seconds")
                              .Help("Median step time of each completed trial, per job and bucket size (MiB)")
                              .Register(registry)),
      bucket_mb_(prometheus::BuildGauge()
                     .Name("weft_operator_tuner_bucket_mb")
                     .Help("Bucket cap (MiB) the tuner last wrote to the job's ConfigMap")
                     .Register(registry)),
      converged_(prometheus::BuildGauge()
                     .Name("weft_operator_tuner_converged")
                     .Help("1 once the job's search has chosen a size, else 0")
                     .Register(registry)),
      scrape_errors_(prometheus::BuildCounter()
                         .Name("weft_operator_tuner_scrape_errors_total")
                         .Help("Scrapes of a rank's /metrics that failed or lacked the tuner's families")
                         .Register(registry)
                         .Add({})) {}

void TunerMetrics::trial_completed(const std::string& ns, const std::string& job, double bucket_mb,
                                   double step_seconds) {
  trials_.Add({{"namespace", ns}, {"trainingjob", job}}).Increment();
  char mb[32];
  std::snprintf(mb, sizeof mb, "%.6g", bucket_mb);
  trial_step_seconds_.Add({{"namespace", ns}, {"trainingjob", job}, {"bucket_mb", mb}}).Set(step_seconds);
  std::lock_guard lock(mu_);
  trial_sizes_[{ns, job}].insert(mb);
}

void TunerMetrics::forget(const std::string& ns, const std::string& job) {
  const prometheus::Labels l{{"namespace", ns}, {"trainingjob", job}};
  std::set<std::string> sizes;
  {
    std::lock_guard lock(mu_);
    auto it = trial_sizes_.find({ns, job});
    if (it != trial_sizes_.end()) {
      sizes = std::move(it->second);
      trial_sizes_.erase(it);
    }
  }
  // Family::Remove needs the series; Has first, so a job never tuned adds nothing.
  if (trials_.Has(l)) trials_.Remove(&trials_.Add(l));
  if (bucket_mb_.Has(l)) bucket_mb_.Remove(&bucket_mb_.Add(l));
  if (converged_.Has(l)) converged_.Remove(&converged_.Add(l));
  for (const std::string& mb : sizes) {
    prometheus::Labels s = l;
    s["bucket_mb"] = mb;
    if (trial_step_seconds_.Has(s)) trial_step_seconds_.Remove(&trial_step_seconds_.Add(s));
  }
}

void TunerMetrics::set_bucket(const std::string& ns, const std::string& job, double bucket_mb, bool converged) {
  trials_.Add({{"namespace", ns}, {"trainingjob", job}});  // at 0 until the first trial completes
  bucket_mb_.Add({{"namespace", ns}, {"trainingjob", job}}).Set(bucket_mb);
  converged_.Add({{"namespace", ns}, {"trainingjob", job}}).Set(converged ? 1 : 0);
}

}  // namespace weft::tuner
