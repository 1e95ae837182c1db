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
  trials_.Add({{"namespace", ns}, {"job", job}}).Increment();
  char mb[32];
  std::snprintf(mb, sizeof mb, "%.6g", bucket_mb);
  trial_step_seconds_.Add({{"namespace", ns}, {"job", job}, {"bucket_mb", mb}}).Set(step_seconds);
}

void TunerMetrics::set_bucket(const std::string& ns, const std::string& job, double bucket_mb, bool converged) {
  bucket_mb_.Add({{"namespace", ns}, {"job", job}}).Set(bucket_mb);
  converged_.Add({{"namespace", ns}, {"job", job}}).Set(converged ? 1 : 0);
}

}  // namespace weft::tuner
