#include "trainingjob/controller.h"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <map>

#include "trainingjob/constants.h"

namespace weft::tj {
namespace {
// Children are watched through one label so the operator never caches the
// cluster's unrelated pods, services, configmaps or network policies.
const std::string kChildSelector = std::string(kLabelManagedBy) + "=" + kManagedBy;
}  // namespace

Controller::Controller(kube::KubeApi& api, ControllerOptions opts, OperatorMetrics* metrics)
    : api_(api),
      opts_(std::move(opts)),
      metrics_(metrics),
      jobs_(api, kube::kTrainingJobs, opts_.ns, "", opts_.resync),
      pods_(api, kube::kPods, opts_.ns, kChildSelector, std::chrono::seconds(0), kLabelJob),
      services_(api, kube::kServices, opts_.ns, kChildSelector, std::chrono::seconds(0)),
      configmaps_(api, kube::kConfigMaps, opts_.ns, kChildSelector, std::chrono::seconds(0)),
      network_policies_(opts_.network_policy ? std::make_unique<kube::Informer>(api, kube::kNetworkPolicies, opts_.ns,
                                                                                kChildSelector, std::chrono::seconds(0))
                                             : nullptr),
      workloads_(opts_.kueue ? std::make_unique<kube::Informer>(api, kube::kWorkloads, opts_.ns, kChildSelector,
                                                                std::chrono::seconds(0), kLabelJob)
                             : nullptr),
      events_(api, "weft-operator"),
      poller_(PollerOptions{.progress_every = opts_.progress,
                            .tuning_every = opts_.tuning_poll,
                            .rank_concurrency = opts_.scrape_concurrency,
                            .on_pass =
                                [metrics](bool every_rank, size_t scraped, double seconds) {
                                  if (metrics) metrics->observe_scrape_pass(every_rank, scraped, seconds);
                                }},
              opts_.scrape),
      reconciler_(api, Caches{jobs_, pods_, services_, configmaps_, network_policies_.get(), workloads_.get()}, events_,
                  metrics) {
  poller_.set_notify([this](const std::string& key) { queue_.add(key); });
  reconciler_.set_poller(&poller_);
  reconciler_.set_pod_powers(opts_.allow);
  reconciler_.set_metrics_from(opts_.metrics_from);
  reconciler_.set_tuner_options({.poll = opts_.tuning_poll});
  reconciler_.set_pod_start_timeout(opts_.pod_start_timeout);
  informers_ = {&jobs_, &pods_, &services_, &configmaps_};
  if (network_policies_) informers_.push_back(network_policies_.get());
  if (workloads_) informers_.push_back(workloads_.get());
  jobs_.add_handler([this](const kube::Json& job) { queue_.add(kube::object_key(job)); });
  for (kube::Informer* inf : informers_)
    if (inf != &jobs_) inf->add_handler([this](const kube::Json& child) { enqueue_owner(child); });
}

Controller::~Controller() { stop(); }

void Controller::enqueue_owner(const kube::Json& child) {
  const auto& meta = child["metadata"];
  if (!meta.contains("ownerReferences")) return;
  for (const auto& ref : meta["ownerReferences"])
    if (ref.value("kind", "") == "TrainingJob" && ref.value("controller", false))
      queue_.add(meta.value("namespace", "") + "/" + ref.value("name", ""));
}

void Controller::start_informers() {
  for (kube::Informer* inf : informers_)
    informer_threads_.emplace_back([inf](std::stop_token s) { inf->run(s); });
  gauges_thread_ = std::jthread([this](std::stop_token s) {
    std::mutex mu;
    std::condition_variable_any cv;
    while (!s.stop_requested()) {
      update_gauges();
      std::unique_lock lock(mu);
      cv.wait_for(lock, s, std::chrono::seconds(2), [] { return false; });
    }
  });
}

bool Controller::synced() const {
  for (const kube::Informer* inf : informers_)
    if (!inf->synced()) return false;
  return true;
}

bool Controller::wait_synced(std::chrono::milliseconds timeout) const {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const kube::Informer* inf : informers_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !inf->wait_synced(left)) return false;
  }
  return true;
}

void Controller::start_workers() {
  if (workers_started_.exchange(true)) return;
  // Reconciling from a partial cache would recreate children that exist, so
  // workers start once every cache has synced. Waiting happens on its own
  // thread: the caller (often the leader-election callback) must not block
  // while the API server is unreachable.
  starter_ = std::jthread([this](std::stop_token stop) {
    while (!stop.stop_requested() && !wait_synced(std::chrono::milliseconds(200))) {
    }
    if (stop.stop_requested()) return;
    for (const auto& job : jobs_.list()) queue_.add(kube::object_key(*job));
    std::lock_guard lock(workers_mu_);
    if (stopped_) return;
    for (int i = 0; i < opts_.workers; ++i) worker_threads_.emplace_back([this] { worker(); });
    poller_.start();
    spdlog::info("started {} reconcile workers", opts_.workers);
  });
}

bool Controller::workers_running() const {
  std::lock_guard lock(workers_mu_);
  return !worker_threads_.empty();
}

void Controller::stop() {
  starter_ = std::jthread();  // request_stop + join
  {
    std::lock_guard lock(workers_mu_);
    stopped_ = true;
  }
  poller_.stop();
  queue_.shutdown();
  worker_threads_.clear();  // jthread joins
  for (auto& t : informer_threads_) t.request_stop();
  informer_threads_.clear();
  gauges_thread_ = std::jthread();
}

void Controller::worker() {
  while (process_next()) {
  }
}

bool Controller::process_next() {
  auto key = queue_.get();
  if (!key) return false;
  auto t0 = std::chrono::steady_clock::now();
  ReconcileResult r = reconciler_.reconcile(*key);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string result;
  switch (r.kind) {
    case ReconcileResult::Kind::Done:
      queue_.forget(*key);
      result = "success";
      break;
    case ReconcileResult::Kind::RequeueAfter:
      queue_.forget(*key);
      queue_.add_after(*key, r.after);
      result = "requeue";
      break;
    case ReconcileResult::Kind::Transient: {
      auto delay = queue_.add_rate_limited(*key);
      spdlog::info("reconcile {}: {} (retry in {} ms)", *key, r.message, delay.count());
      result = "transient_error";
      break;
    }
    case ReconcileResult::Kind::Terminal:
      queue_.forget(*key);
      spdlog::warn("reconcile {}: {} (not retried)", *key, r.message);
      result = "terminal_error";
      break;
    case ReconcileResult::Kind::NotFound:
      queue_.forget(*key);
      result = "not_found";
      break;
  }
  if (metrics_) metrics_->observe_reconcile(result, secs);
  queue_.done(*key);
  return true;
}

void Controller::update_gauges() {
  if (!metrics_) return;
  std::map<std::string, int> by_phase;
  for (const auto& job : jobs_.list())
    if (job->contains("status")) ++by_phase[(*job)["status"].value("phase", "")];
  metrics_->set_jobs_by_phase(by_phase);
  metrics_->set_queue_depth(static_cast<double>(queue_.depth()));
  metrics_->set_api_requests(api_.request_counts());
}

}  // namespace weft::tj
