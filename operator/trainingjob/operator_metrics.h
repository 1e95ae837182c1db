// weft_operator_* metrics. The caller owns the registry (main, or a test);
// handles are built once here and kept. Names follow Prometheus conventions
// (_total, _seconds).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <string>

#include "metrics_server.h"

namespace weft::tj {

// Serves `registry` at http://bind_address:port/metrics with the worker's
// server (serving/metrics_server.h): one poll-loop thread, every connection
// under a 5 s deadline and at most 64 open, so idle keep-alive clients and
// slow ones never delay a scrape. Each response says "Connection: close"
// and closes, so a client that would reuse its connection opens a new one.
// Throws std::runtime_error naming the address when the port cannot be bound.
std::unique_ptr<MetricsServer> serve_operator_metrics(const std::string& bind_address, int port,
                                                      const std::shared_ptr<prometheus::Registry>& registry);

// Every counter with a known set of label values starts at 0 for each of them
// (restart causes, resize directions, straggler actions, reconcile results),
// so Prometheus' increase() sees the first event as a step from 0.
class OperatorMetrics {
 public:
  explicit OperatorMetrics(prometheus::Registry& registry);

  // result: success, requeue, transient_error, terminal_error, not_found
  void observe_reconcile(const std::string& result, double seconds);
  // A gang restart for `cause` (a FailureCause name: Failure, OOMKilled,
  // Evicted, Preempted, NodeLost, Deleted, StartTimeout).
  void add_restart(const std::string& cause) { restarts_.Add({{"cause", cause}}).Increment(); }
  // An elastic job's gang changed size: direction shrink or grow.
  void add_resize(const std::string& direction) { resizes_.Add({{"direction", direction}}).Increment(); }
  // A rank named a straggler (spec.stragglers); replaced: its gang relaunched away from its node.
  void add_straggler(bool replaced) { stragglers_.Add({{"action", replaced ? "replace" : "none"}}).Increment(); }
  void set_queue_depth(double d) { queue_depth_.Set(d); }
  void set_jobs_by_phase(const std::map<std::string, int>& counts);
  void set_leader(bool leader) { leader_.Set(leader ? 1 : 0); }
  void set_api_requests(const std::map<std::string, long>& by_verb);
  // One pass of the scrape poller (scrape_poller.h): every_rank (tuning or
  // stragglers) or rank 0 only, the ranks it scraped and its wall time.
  void observe_scrape_pass(bool every_rank, size_t scraped, double seconds);
  // For policies that add their own families (the bucket-size tuner).
  prometheus::Registry& registry() const { return registry_; }

 private:
  prometheus::Histogram& scrape_pass_histogram(const char* scope);
  prometheus::Registry& registry_;
  prometheus::Family<prometheus::Counter>& reconciles_;
  prometheus::Histogram& reconcile_seconds_;
  prometheus::Family<prometheus::Counter>& restarts_;
  prometheus::Family<prometheus::Counter>& resizes_;
  prometheus::Family<prometheus::Counter>& stragglers_;
  prometheus::Gauge& queue_depth_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Gauge& leader_;
  prometheus::Family<prometheus::Gauge>& api_requests_;
  prometheus::Family<prometheus::Histogram>& scrape_pass_seconds_;
  prometheus::Family<prometheus::Counter>& rank_scrapes_;
};

}  // namespace weft::tj
