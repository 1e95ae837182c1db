#include "trainingjob/operator_metrics.h"

#include "trainingjob/constants.h"
#include "trainingjob/restart_policy.h"

namespace weft::tj {

std::unique_ptr<MetricsServer> serve_operator_metrics(const std::string& bind_address, int port,
                                                      const std::shared_ptr<prometheus::Registry>& registry) {
  // Not prometheus::Exposer: civetweb's 2 threads each sat on an idle
  // keep-alive connection for up to its 120 s timeout, so two idle clients
  // made other clients' scrapes wait 9-40 s (issue #70).
  return std::make_unique<MetricsServer>(registry, bind_address, port);
}

OperatorMetrics::OperatorMetrics(prometheus::Registry& r)
    : registry_(r),
      reconciles_(prometheus::BuildCounter()
                      .Name("weft_operator_reconciles_total")
                      .Help("Reconciles of TrainingJobs by result")
                      .Register(r)),
      reconcile_seconds_(prometheus::BuildHistogram()
                             .Name("weft_operator_reconcile_seconds")
                             .Help("Time spent in one reconcile")
                             .Register(r)
                             .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                                              0.1, 0.25, 0.5, 1, 2.5, 5, 10})),
      restarts_(prometheus::BuildCounter()
                    .Name("weft_operator_gang_restarts_total")
                    .Help("Gang restarts performed, by cause (Failure, OOMKilled and StartTimeout count against "
                          "maxRestarts; Evicted, Preempted, NodeLost and Deleted do not)")
                    .Register(r)),
      resizes_(prometheus::BuildCounter()
                   .Name("weft_operator_elastic_resizes_total")
                   .Help("Elastic jobs' gangs relaunched at another size: shrink (pods not placed in time) or "
                         "grow (the planned size tried again)")
                   .Register(r)),
      stragglers_(prometheus::BuildCounter()
                      .Name("weft_operator_stragglers_total")
                      .Help("Ranks named stragglers (compute per step beyond spec.stragglers.threshold above their "
                            "gang's median), by the action taken: none (named) or replace (the gang relaunched "
                            "away from the rank's node)")
                      .Register(r)),
      queue_depth_(prometheus::BuildGauge()
                       .Name("weft_operator_queue_depth")
                       .Help("Job keys waiting for a reconcile worker")
                       .Register(r)
                       .Add({})),
      jobs_(prometheus::BuildGauge().Name("weft_operator_jobs").Help("TrainingJobs by status.phase").Register(r)),
      leader_(prometheus::BuildGauge()
                  .Name("weft_operator_leader")
                  .Help("1 while this replica holds the leader Lease")
                  .Register(r)
                  .Add({})),
      api_requests_(prometheus::BuildGauge()
                        .Name("weft_operator_api_requests")
                        .Help("Requests sent to the API server since start, by verb")
                        .Register(r)),
      scrape_pass_seconds_(prometheus::BuildHistogram()
                               .Name("weft_operator_scrape_pass_seconds")
                               .Help("Wall time of one pass of the rank scrape poller over one job, by scope: "
                                     "rank0 (status.progress only) or every_rank (the bucket-size tuner or "
                                     "straggler detection)")
                               .Register(r)),
      rank_scrapes_(prometheus::BuildCounter()
                        .Name("weft_operator_rank_scrapes_total")
                        .Help("Scrapes of ranks' /metrics by the scrape poller, by scope (as above)")
                        .Register(r)) {
  for (FailureCause c : {FailureCause::Failure, FailureCause::OOMKilled, FailureCause::Evicted, FailureCause::Preempted,
                         FailureCause::NodeLost, FailureCause::Deleted, FailureCause::StartTimeout})
    restarts_.Add({{"cause", cause_name(c)}});
  for (const char* direction : {"shrink", "grow"}) resizes_.Add({{"direction", direction}});
  for (const char* action : {"none", "replace"}) stragglers_.Add({{"action", action}});
  for (const char* res : {"success", "requeue", "transient_error", "terminal_error", "not_found"})
    reconciles_.Add({{"result", res}});
  set_jobs_by_phase({});
  for (const char* scope : {"rank0", "every_rank"}) {
    scrape_pass_histogram(scope);
    rank_scrapes_.Add({{"scope", scope}});
  }
}

prometheus::Histogram& OperatorMetrics::scrape_pass_histogram(const char* scope) {
  return scrape_pass_seconds_.Add({{"scope", scope}},
                                  prometheus::Histogram::BucketBoundaries{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                                          2, 4, 8, 16});
}

void OperatorMetrics::observe_scrape_pass(bool every_rank, size_t scraped, double seconds) {
  const char* scope = every_rank ? "every_rank" : "rank0";
  scrape_pass_histogram(scope).Observe(seconds);
  rank_scrapes_.Add({{"scope", scope}}).Increment(static_cast<double>(scraped));
}

void OperatorMetrics::observe_reconcile(const std::string& result, double seconds) {
  reconciles_.Add({{"result", result}}).Increment();
  reconcile_seconds_.Observe(seconds);
}

void OperatorMetrics::set_jobs_by_phase(const std::map<std::string, int>& counts) {
  for (const char* p : {kPhasePending, kPhaseRunning, kPhaseRestarting, kPhaseSucceeded, kPhaseFailed, kPhaseSuspended}) {
    auto it = counts.find(p);
    jobs_.Add({{"phase", p}}).Set(it == counts.end() ? 0 : it->second);
  }
}

void OperatorMetrics::set_api_requests(const std::map<std::string, long>& by_verb) {
  for (const auto& [verb, n] : by_verb) api_requests_.Add({{"verb", verb}}).Set(static_cast<double>(n));
}

}  // namespace weft::tj
