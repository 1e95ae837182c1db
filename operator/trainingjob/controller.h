// Controller: wires informers to the work queue and runs reconcile workers.
// Reads top to bottom: run -> worker -> process_next -> reconcile.
//
//  - Informers start at once (a standby replica keeps warm caches); workers
//    only start when start_workers() is called (after winning the election),
//    and so does the scrape poller (scrape_poller.h) the reconciler reads.
//  - Events from any informer only enqueue the owning job's key; so does the
//    poller when it has new figures of a job.
//  - Reconcile results map to queue actions: Done -> forget; RequeueAfter ->
//    forget + add_after; Transient -> add_rate_limited (5 ms .. 1000 s);
//    Terminal and NotFound -> forget, no requeue.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "kube/events.h"
#include "kube/informer.h"
#include "kube/kube_api.h"
#include "kube/work_queue.h"
#include "trainingjob/operator_metrics.h"
#include "trainingjob/reconciler.h"
#include "trainingjob/scrape_poller.h"

namespace weft::tj {

struct ControllerOptions {
  std::string ns{};                        // "" = all namespaces
  int workers = 4;
  std::chrono::seconds resync{300};
  std::chrono::seconds progress{10};       // status.progress scrape interval per running job; 0 = off
  std::chrono::milliseconds tuning_poll = tuner::TunerOptions{}.poll;  // between the tuner's scrape rounds
  int scrape_concurrency = PollerOptions{}.rank_concurrency;           // ranks of one job scraped at once
  PodPowers allow{};                       // what spec.template may give the pods beyond the baseline
  bool network_policy = true;              // one NetworkPolicy per job (builders.h, build_network_policy)
  // A job labelled kueue.x-k8s.io/queue-name runs only while Kueue admits its
  // Workload (queue_policy.h); needs Kueue's CRDs.
  bool kueue = false;
  Json metrics_from = nullptr;             // its metrics-port peers; null = anyone
  ScrapePoller::ScrapeFn scrape{};         // how the poller reads a rank's /metrics; empty = HTTP
  // How long a pod on its node may take to start its worker (start_policy.h); 0 = no deadline.
  std::chrono::seconds pod_start_timeout{kDefaultPodStartTimeoutSeconds};
};

class Controller {
 public:
  Controller(kube::KubeApi& api, ControllerOptions opts, OperatorMetrics* metrics = nullptr);
  ~Controller();

  void start_informers();                  // returns immediately
  bool wait_synced(std::chrono::milliseconds timeout) const;
  void start_workers();                    // idempotent, returns at once; workers run once caches sync
  bool workers_running() const;
  void stop();                             // stops workers and informers, joins

  bool synced() const;
  size_t queue_depth() const { return queue_.depth(); }
  kube::Informer& jobs() { return jobs_; }
  kube::Informer& pods() { return pods_; }

 private:
  void worker();
  bool process_next();
  void enqueue_owner(const kube::Json& child);
  void update_gauges();

  kube::KubeApi& api_;
  ControllerOptions opts_;
  OperatorMetrics* metrics_;
  kube::Informer jobs_, pods_, services_, configmaps_;
  std::unique_ptr<kube::Informer> network_policies_;  // null when opts_.network_policy is off
  std::unique_ptr<kube::Informer> workloads_;         // null without opts_.kueue
  std::vector<kube::Informer*> informers_;             // all of the above
  kube::WorkQueue queue_;
  kube::EventRecorder events_;
  ScrapePoller poller_;  // started with the workers: only the leader scrapes
  Reconciler reconciler_;
  std::vector<std::jthread> informer_threads_;
  std::vector<std::jthread> worker_threads_;
  std::jthread gauges_thread_;
  std::jthread starter_;
  mutable std::mutex workers_mu_;
  bool stopped_ = false;
  std::atomic<bool> workers_started_{false};
};

}  // namespace weft::tj
