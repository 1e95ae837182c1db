// The reconcile flow: read the job and what it owns, decide with the pure
// policies, apply, write status once. Child-object mechanics are in
// reconciler_children.cc.
#include "trainingjob/reconciler.h"

#include "trainingjob/reconciler_context.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "trainingjob/phase_policy.h"
#include "trainingjob/restart_policy.h"
#include "trainingjob/success_policy.h"
#include "trainingjob/ttl_policy.h"
#include "trainingjob/types.h"

namespace weft::tj {
using kube::ApiError;
using kube::ObjectPtr;
using Kind = ReconcileResult::Kind;
using namespace detail;



Reconciler::Reconciler(kube::KubeApi& api, Caches caches, kube::EventRecorder& events, OperatorMetrics* metrics,
                       std::function<TimePoint()> now)
    : api_(api), caches_(caches), events_(events), metrics_(metrics), now_(std::move(now)) {}

ReconcileResult Reconciler::reconcile(const std::string& key) {
  Context cx;
  auto slash = key.find('/');
  cx.ns = key.substr(0, slash);
  cx.name = slash == std::string::npos ? "" : key.substr(slash + 1);
  cx.job = current_job(cx.ns, cx.name);
  if (!cx.job) return ReconcileResult::not_found();  // deleted: the garbage collector removes the children
  const Json& job = *cx.job;
  if (terminating(job)) return ReconcileResult::done();

  cx.now = now_();
  cx.now_s = format_time(cx.now);
  cx.generation = job["metadata"].value("generation", 0L);
  std::vector<SpecError> errors;
  cx.spec = parse_spec(job.contains("spec") ? job["spec"] : Json(), &errors);
  for (auto& e : validate(cx.spec)) errors.push_back(std::move(e));
  cx.status = parse_status(job.contains("status") ? job["status"] : Json::object());
  cx.status_before = to_json(cx.status);
  cx.status.observed_generation = cx.generation;
  const std::string uid = job["metadata"].value("uid", "");
  for (auto& pod : caches_.pods.by_index(cx.ns, cx.name))
    if (owned_by(*pod, uid)) cx.pods.push_back(pod);

  TrainingJobStatus& st = cx.status;
  if (st.phase == kPhaseSucceeded || st.phase == kPhaseFailed) return finished_job(cx);

  if (!errors.empty()) {
    // The API server (< 1.25) could not enforce these rules; refuse the job
    // before anything is created.
    const std::string msg = describe(errors);
    delete_pods(cx, cx.pods);
    st.phase = kPhaseFailed;
    st.completion_time = cx.now_s;
    st.set_condition(kCondFailed, true, kReasonInvalidSpec, msg, cx.generation, cx.now_s);
    cx.event("Warning", kReasonInvalidSpec, msg);
    return finish(cx, ReconcileResult::terminal(msg));
  }
  if (st.phase.empty()) st.phase = kPhasePending;
  if (!ensure_children(cx)) return finish(cx, ReconcileResult::done());

  // Suspend: the pods go, everything else (attempt, restarts, children) stays.
  if (cx.spec.suspend) {
    std::vector<ObjectPtr> live;
    for (auto& p : cx.pods)
      if (!terminating(*p)) live.push_back(p);
    delete_pods(cx, live);
    const Condition* c = st.condition(kCondSuspended);
    if (!c || c->status != "True")
      cx.event("Normal", kReasonSuspended, "suspended: deleted " + std::to_string(live.size()) + " pods");
    st.set_condition(kCondSuspended, true, kReasonSuspended, "spec.suspend is true", cx.generation, cx.now_s);
    st.set_condition(kCondReady, false, kReasonSuspended, "job is suspended", cx.generation, cx.now_s);
    st.phase = kPhaseSuspended;
    st.ready_replicas = 0;
    st.attempt_start_time.clear();
    return finish(cx, ReconcileResult::done());
  }
  if (const Condition* c = st.condition(kCondSuspended); c && c->status == "True") {
    // A fresh attempt number keeps the new gang's rendezvous keys apart from the old one's.
    ++st.attempt;
    st.attempt_start_time.clear();
    st.set_condition(kCondSuspended, false, kReasonResumed, "spec.suspend is false", cx.generation, cx.now_s);
    cx.event("Normal", kReasonResumed, "resumed as attempt " + std::to_string(st.attempt));
  }

  // After launch, a rank missing from the cache is either deleted or not yet
  // seen by our watch; only a live read can tell, and every decision below
  // (spec change, restart) must be made on that authoritative view.
  if (!st.attempt_start_time.empty() && !cache_shows_full_gang(cx) && !refresh_pods_live(cx))
    return finish(cx, ReconcileResult::done());  // cx.error makes it transient
  // A spec change (replicas, image, worker config, ...) during an attempt
  // relaunches the gang as a new attempt; it is not a failure, so it neither
  // counts against maxRestarts nor waits for a backoff.
  {
    const std::string want = pod_spec_hash(cx.spec);
    for (auto& p : cx.pods) {
      if (terminating(*p) || label_int(*p, kLabelAttempt, -1) != st.attempt) continue;
      const Json& meta = (*p)["metadata"];
      const std::string have = meta.contains("annotations") ? meta["annotations"].value(kAnnotationSpecHash, "") : "";
      if (have == want) continue;
      ++st.attempt;
      st.attempt_start_time.clear();
      spdlog::info("{}: spec changed (generation {}), relaunching as attempt {}", key, cx.generation, st.attempt);
      cx.event("Normal", kReasonSpecChanged,
               "spec changed (generation " + std::to_string(cx.generation) + "): relaunching the gang as attempt " +
                   std::to_string(st.attempt));
      break;
    }
  }
  const int attempt = st.attempt;
  std::vector<ObjectPtr> current, stale;
  for (auto& p : cx.pods) (label_int(*p, kLabelAttempt, -1) == attempt ? current : stale).push_back(p);
  {
    std::vector<ObjectPtr> live_stale;
    for (auto& p : stale)
      if (!terminating(*p)) live_stale.push_back(p);
    delete_pods(cx, live_stale);
  }

  GangObservation gang;
  gang.replicas = cx.spec.replicas;
  gang.attempt = attempt;
  gang.launched = !st.attempt_start_time.empty();
  std::set<int> present;
  for (auto& p : current) {
    if (terminating(*p)) continue;  // only we delete pods of the current attempt on purpose, and then bump it
    RankState r = observe_pod(*p, kContainerName);
    present.insert(r.rank);
    gang.ranks.push_back(r);
  }
  if (gang.launched)
    for (int r = 0; r < gang.replicas; ++r)
      if (!present.count(r)) gang.missing_ranks.push_back(r);  // the pod view is live here (see above)

  const RestartDecision decision = decide_restart(gang, st.restarts, cx.spec.restart);
  if (decision.verdict == GangVerdict::Fail) {
    std::vector<ObjectPtr> running;
    for (auto& p : current)
      if (!terminating(*p) && !pod_finished(*p)) running.push_back(p);
    delete_pods(cx, running);
    st.phase = kPhaseFailed;
    st.completion_time = cx.now_s;
    st.ready_replicas = 0;
    st.set_condition(kCondFailed, true, decision.reason, decision.message, cx.generation, cx.now_s);
    st.set_condition(kCondReady, false, decision.reason, "job failed", cx.generation, cx.now_s);
    cx.event("Warning", decision.reason, decision.message);
    auto ttl = ttl_remaining(cx.spec, st, cx.now);
    return finish(cx, ttl ? ReconcileResult::requeue_after(std::max(*ttl, std::chrono::seconds(0)))
                          : ReconcileResult::done());
  }
  if (decision.verdict == GangVerdict::Restart) {
    std::vector<ObjectPtr> live;
    for (auto& p : current)
      if (!terminating(*p)) live.push_back(p);
    delete_pods(cx, live);
    ++st.restarts;
    ++st.attempt;
    st.last_restart_time = cx.now_s;
    st.attempt_start_time.clear();
    st.ready_replicas = 0;
    st.phase = kPhaseRestarting;
    const auto backoff = restart_backoff(st.restarts, cx.spec.restart);
    const std::string msg = decision.message + "; restarting the gang as attempt " + std::to_string(st.attempt) +
                            " in " + std::to_string(backoff.count()) + "s (restart " + std::to_string(st.restarts) +
                            " of " + std::to_string(cx.spec.restart.max_restarts) + ")";
    st.set_condition(kCondRestarting, true, decision.reason, msg, cx.generation, cx.now_s);
    st.set_condition(kCondReady, false, decision.reason, "gang restarting", cx.generation, cx.now_s);
    cx.event("Warning", decision.reason, msg);
    spdlog::info("{}: {}", key, msg);
    if (metrics_) metrics_->add_restart();
    return finish(cx, ReconcileResult::requeue_after(std::max<std::chrono::milliseconds>(backoff, std::chrono::milliseconds(1))));
  }
  if (gang_succeeded(gang)) {
    st.phase = kPhaseSucceeded;
    st.completion_time = cx.now_s;
    st.ready_replicas = 0;
    st.set_condition(kCondSucceeded, true, kReasonCompleted, "all " + std::to_string(gang.replicas) + " ranks exited 0",
                     cx.generation, cx.now_s);
    st.set_condition(kCondReady, false, kReasonCompleted, "job completed", cx.generation, cx.now_s);
    if (st.condition(kCondRestarting)) st.set_condition(kCondRestarting, false, kReasonCompleted, "", cx.generation, cx.now_s);
    cx.event("Normal", kReasonCompleted, "all " + std::to_string(gang.replicas) + " ranks exited 0");
    auto ttl = ttl_remaining(cx.spec, st, cx.now);
    return finish(cx, ttl ? ReconcileResult::requeue_after(std::max(*ttl, std::chrono::seconds(0)))
                          : ReconcileResult::done());
  }

  const bool restarting = st.restarts > 0 && st.condition(kCondRestarting) &&
                          st.condition(kCondRestarting)->status == "True";
  // The new gang waits until the old one is gone and the backoff has passed.
  if (!stale.empty()) {
    if (restarting) st.phase = kPhaseRestarting;
    return finish(cx, ReconcileResult::requeue_after(std::chrono::seconds(2)));
  }
  if (restarting && gang.ranks.empty()) {
    auto last = parse_time(st.last_restart_time);
    auto ready_at = (last ? *last : cx.now) + restart_backoff(st.restarts, cx.spec.restart);
    if (ready_at > cx.now) {
      st.phase = kPhaseRestarting;
      return finish(cx, ReconcileResult::requeue_after(
                            std::chrono::duration_cast<std::chrono::milliseconds>(ready_at - cx.now) +
                            std::chrono::milliseconds(10)));
    }
  }

  std::vector<int> missing_ranks;
  for (int rank = 0; rank < cx.spec.replicas; ++rank)
    if (!present.count(rank)) missing_ranks.push_back(rank);
  const int created = create_pods(cx, missing_ranks, attempt, gang, present);
  if (created > 0)
    cx.event("Normal", kReasonPodsCreated,
             "created " + std::to_string(created) + " pods for attempt " + std::to_string(attempt));
  if (static_cast<int>(present.size()) == cx.spec.replicas && st.attempt_start_time.empty()) {
    st.attempt_start_time = cx.now_s;
    if (st.start_time.empty()) st.start_time = cx.now_s;
  }

  if (cx.error && !cx.error->transient() && cx.error->status != 403) {
    // The API server refused a pod built from the user's spec (e.g. an
    // invalid template override): retrying cannot help.
    const std::string msg = "creating pods failed: " + cx.error->message;
    st.phase = kPhaseFailed;
    st.completion_time = cx.now_s;
    st.set_condition(kCondFailed, true, kReasonCreateFailed, msg, cx.generation, cx.now_s);
    cx.event("Warning", kReasonCreateFailed, msg);
    cx.error.reset();
    return finish(cx, ReconcileResult::terminal(msg));
  }

  const PhaseView view = compute_phase(gang, PhaseFacts{false, false, false, restarting});
  st.phase = view.phase;
  st.ready_replicas = view.ready;
  if (view.all_running) {
    st.set_condition(kCondReady, true, kReasonAllRanksRunning, "all ranks running", cx.generation, cx.now_s);
    if (restarting)
      st.set_condition(kCondRestarting, false, kReasonAllRanksRunning, "attempt " + std::to_string(attempt) + " running",
                       cx.generation, cx.now_s);
  } else {
    st.set_condition(kCondReady, false, kReasonWaitingForRanks,
                     std::to_string(view.running) + " of " + std::to_string(cx.spec.replicas) + " ranks running",
                     cx.generation, cx.now_s);
  }
  return finish(cx, ReconcileResult::done());
}

kube::ObjectPtr Reconciler::current_job(const std::string& ns, const std::string& name) {
  const std::string key = ns + "/" + name;
  ObjectPtr cached = caches_.jobs.get(ns, name);
  std::string written;
  {
    std::lock_guard lock(written_mu_);
    if (!cached) {
      written_rv_.erase(key);
      return nullptr;
    }
    auto it = written_rv_.find(key);
    if (it == written_rv_.end()) return cached;
    written = it->second;
  }
  const std::string cached_rv = (*cached)["metadata"].value("resourceVersion", "");
  if (cached_rv == written) return cached;
  // The cache may not have seen our last status write yet (or someone else
  // changed the job since): acting on it could, e.g., recreate a pod whose
  // deletion the newer status already accounts for. Read the job live.
  auto live = api_.get(kube::kTrainingJobs, ns, name);
  if (!live) return live.error().not_found() ? nullptr : cached;
  std::lock_guard lock(written_mu_);
  if ((*live)["metadata"].value("resourceVersion", "") == cached_rv) written_rv_[key] = cached_rv;  // cache is current
  return std::make_shared<const Json>(std::move(*live));
}

ReconcileResult Reconciler::finished_job(Context& cx) {
  if (cx.status.phase == kPhaseFailed) {
    std::vector<ObjectPtr> running;
    for (auto& p : cx.pods)
      if (!terminating(*p) && !pod_finished(*p)) running.push_back(p);
    delete_pods(cx, running);
  }
  auto ttl = ttl_remaining(cx.spec, cx.status, cx.now);
  if (ttl && ttl->count() <= 0) {
    auto res = api_.remove(kube::kTrainingJobs, cx.ns, cx.name, kube::Propagation::Background,
                           (*cx.job)["metadata"].value("uid", ""));
    if (!res && !res.error().not_found()) return ReconcileResult::transient(res.error().message);
    spdlog::info("deleted {}/{}: ttlSecondsAfterFinished expired", cx.ns, cx.name);
    return ReconcileResult::done();
  }
  return finish(cx, ttl ? ReconcileResult::requeue_after(*ttl) : ReconcileResult::done());
}

ReconcileResult Reconciler::finish(Context& cx, ReconcileResult result) {
  Json status = to_json(cx.status);
  if (status != cx.status_before) {
    Json updated = *cx.job;  // a copy: the cached object stays untouched
    updated["status"] = status;
    auto res = api_.update_status(kube::kTrainingJobs, cx.ns, updated);
    if (!res) {
      if (res.error().not_found()) return ReconcileResult::not_found();
      return ReconcileResult::transient("status update: " + res.error().message);
    }
    std::lock_guard lock(written_mu_);
    written_rv_[cx.ns + "/" + cx.name] = (*res)["metadata"].value("resourceVersion", "");
  }
  for (const auto& [type, reason, message] : cx.events) events_.record(*cx.job, type, reason, message);
  if (cx.error) {
    if (cx.error->transient() || cx.error->status == 403) return ReconcileResult::transient(cx.error->message);
    return ReconcileResult::terminal(cx.error->message);
  }
  return result;
}

}  // namespace weft::tj
