// The reconciler's tuning steps. observe_tuning takes the running ranks'
// samples from the scrape poller's latest round (scrape_poller.h) while the
// tuner needs them; tune_bucket_size hands them with status.tuning and the
// spec to the tuner's pure decision (tuner/bucket_tuner.h) and applies what
// it returns: the ConfigMap key the workers poll, status.tuning, events and
// the tuner's metrics.
#include <spdlog/spdlog.h>

#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "trainingjob/reconciler.h"
#include "trainingjob/reconciler_context.h"
#include "trainingjob/scrape_poller.h"
#include "weft_contract.h"

namespace weft::tj {
using namespace detail;

void Reconciler::observe_tuning(Context& cx) {
  if (!cx.spec.bucket_tuning.enabled || !tuner::needs_samples(cx.status.tuning)) return;
  // The poller's latest round, if it was scraped from the ranks this
  // reconcile sees (the same attempt, pods and IPs).
  if (!cx.scrape || !cx.figures || !cx.figures->round) return;
  const ScrapedRound& round = *cx.figures->round;
  if (!round.target.same_ranks(*cx.scrape)) return;
  {
    // Each round reaches the tuner once: a reconcile between two rounds
    // (a pod event, a requeue) hands it no samples.
    std::lock_guard lock(tuning_mu_);
    uint64_t& seen = tuning_seen_[cx.key()];
    if (round.seq <= seen) return;
    seen = round.seq;
  }
  cx.tuning_ranks = round.ranks;
}

ReconcileResult Reconciler::tune_bucket_size(Context& cx) {
  if (!cx.spec.bucket_tuning.enabled) return ReconcileResult::done();
  tuner::TuneRequest req;
  req.ns = cx.ns;
  req.name = cx.name;
  req.attempt = cx.status.attempt;
  req.tuning = cx.spec.bucket_tuning;
  req.start_mb = cx.spec.bucket_cap_mb().value_or(0);  // 0: auto, the size the ranks report
  req.replicas = cx.spec.replicas;
  req.status = cx.status.tuning;
  req.ranks = cx.tuning_ranks;
  const std::string uid = (*cx.job)["metadata"].value("uid", "");

  tuner::TuneDecision d;
  {
    std::lock_guard lock(tuning_mu_);
    auto it = tuning_open_.find(uid);
    d = tuner::decide_tuning(req, it == tuning_open_.end() ? nullptr : &it->second, tuner_opts_);
    if (d.open) tuning_open_[uid] = std::move(*d.open);
    else if (it != tuning_open_.end()) tuning_open_.erase(it);
  }

  if (d.scrape_failed) {
    for (const auto& r : req.ranks)
      if (!r.sample) {
        spdlog::debug("{}: tuner scrape of rank {}: {}", cx.key(), r.rank, r.error);
        break;
      }
  }
  if (d.write_mb) cx.changes.bucket_cap_mb = tuner::format_mb(*d.write_mb);
  if (tuner_metrics_) {
    if (d.scrape_failed) tuner_metrics_->scrape_failed();
    if (d.completed) tuner_metrics_->trial_completed(cx.ns, cx.name, d.completed->bucket_mb,
                                                      d.completed->median_step_seconds);
    if (d.status)
      tuner_metrics_->set_bucket(cx.ns, cx.name, d.status->current_bucket_mb,
                                 d.status->state == TuningState::Converged);
  }
  if (d.status) cx.status.tuning = std::move(d.status);
  for (auto& e : d.events) {
    if (e.reason == std::string(tuner::kReasonConverged)) spdlog::info("{}: bucket-size tuning {}", cx.key(), e.message);
    cx.event(e.type, e.reason, e.message);
  }
  return d.requeue_after ? ReconcileResult::requeue_after(*d.requeue_after) : ReconcileResult::done();
}

}  // namespace weft::tj
