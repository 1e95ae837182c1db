// The reconcile flow: read the job and what it owns, decide with the pure
// policies, apply, write status once. Each step below is one decision of
// reconcile(); child-object mechanics are in reconciler_children.cc.
#include "trainingjob/reconciler.h"

#include "trainingjob/reconciler_context.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "trainingjob/elastic_policy.h"
#include "trainingjob/memory_policy.h"
#include "trainingjob/phase_policy.h"
#include "trainingjob/progress.h"
#include "trainingjob/restart_policy.h"
#include "trainingjob/scrape_poller.h"
#include "trainingjob/scheduling_policy.h"
#include "trainingjob/start_policy.h"
#include "trainingjob/success_policy.h"
#include "trainingjob/ttl_policy.h"
#include "trainingjob/types.h"

namespace weft::tj {
using kube::ApiError;
using kube::ObjectPtr;
using Kind = ReconcileResult::Kind;
using namespace detail;

namespace {

// A gang restart is in progress until every rank of the new attempt runs.
bool restart_in_progress(const TrainingJobStatus& st) {
  const Condition* c = st.condition(kCondRestarting);
  return st.restarts > 0 && c && c->status == "True";
}

// A finished job is requeued for its TTL, if it has one.
ReconcileResult requeue_for_ttl(const TrainingJobSpec& spec, const TrainingJobStatus& st, TimePoint now) {
  auto ttl = ttl_remaining(spec, st, now);
  return ttl ? ReconcileResult::requeue_after(std::max(*ttl, std::chrono::milliseconds(0))) : ReconcileResult::done();
}

std::vector<ObjectPtr> not_terminating(const std::vector<ObjectPtr>& pods) {
  std::vector<ObjectPtr> out;
  for (const auto& p : pods)
    if (!terminating(*p)) out.push_back(p);
  return out;
}

// Pods that still run: a failed job deletes these and keeps the finished ones
// for their logs.
std::vector<ObjectPtr> still_running(const std::vector<ObjectPtr>& pods) {
  std::vector<ObjectPtr> out;
  for (const auto& p : pods)
    if (!terminating(*p) && !pod_finished(*p)) out.push_back(p);
  return out;
}

}  // namespace

// How a job ends.
struct Reconciler::Terminal {
  bool succeeded = false;
  std::string reason, message;
  // The restart or success policy judged the launched gang: its ranks stop
  // counting as ready and Ready turns False. A spec or a pod refused before
  // the gang was judged leaves readiness as it was.
  bool gang_judged = false;
};

Reconciler::Reconciler(kube::KubeApi& api, Caches caches, kube::EventRecorder& events, OperatorMetrics* metrics,
                       std::function<TimePoint()> now)
    : api_(api),
      caches_(caches),
      events_(events),
      metrics_(metrics),
      now_(std::move(now)),
      tuner_metrics_(metrics ? std::make_unique<tuner::TunerMetrics>(metrics->registry()) : nullptr) {}

ReconcileResult Reconciler::reconcile(const std::string& key) {
  Context cx;
  ReconcileResult result = steps(key, cx);
  tell_poller(key, cx, result);
  return result;
}

ReconcileResult Reconciler::steps(const std::string& key, Context& cx) {
  if (auto early = read_state(key, cx)) return *early;
  TrainingJobStatus& st = cx.status;
  if (st.phase == kPhaseSucceeded || st.phase == kPhaseFailed) return finished_job(cx);
  if (!cx.spec_errors.empty()) return refuse_spec(cx);
  // Before any pod starts: a rank that will not fit its memory limit (the
  // worker would exit 1) is a Warning, not a refusal.
  if (auto warning = apply_memory_check(st, check_memory(cx.spec), cx.generation, cx.now_s))
    cx.event("Warning", kReasonLimitBelowEstimate, *warning);
  if (st.phase.empty()) set_phase(st, GangObservation{}, PhaseFacts{});  // Pending
  if (!ensure_children(cx)) return finish(cx, ReconcileResult::done());
  if (cx.spec.suspend) return suspend(cx);
  resume_if_suspended(cx);
  if (auto waiting = gate_on_queue(cx)) return *waiting;

  // After launch, a rank missing from the cache is either deleted or not yet
  // seen by our watch; only a live read can tell, and every decision below
  // (spec change, restart) must be made on that authoritative view.
  if (!st.attempt_start_time.empty() && !cache_shows_full_gang(cx) && !refresh_pods_live(cx))
    return finish(cx, ReconcileResult::done());  // cx.error makes it transient
  if (relaunch_if_spec_changed(cx)) return finish(cx, ReconcileResult::requeue_after(std::chrono::milliseconds(1)));
  observe_gang(cx);
  // Older attempts' pods are stale from the moment the attempt after theirs
  // was written (next_attempt): they go, whatever is decided below.
  cx.delete_pods(not_terminating(cx.stale));

  const RestartDecision decision = decide_restart(cx.gang, counted_restarts(st), cx.spec.restart);
  if (decision.verdict == GangVerdict::Fail) return fail_gang(cx, decision);
  if (decision.verdict == GangVerdict::Restart) return restart_gang(cx, decision);
  if (gang_succeeded(cx.gang)) return complete(cx);
  // Pods on their node whose worker has not started: blocked for a cause a
  // restart cannot cure (reported; Failed at the deadline), or slow past it
  // (a counted restart).
  cx.start = decide_start(cx.gang, cx.now, pod_start_timeout_, counted_restarts(st), cx.spec.restart);
  if (cx.start.act.verdict == GangVerdict::Fail) return fail_gang(cx, cx.start.act);
  if (cx.start.act.verdict == GangVerdict::Restart) return restart_gang(cx, cx.start.act);
  if (auto resized = resize_gang(cx)) return *resized;

  if (auto wait = wait_for_relaunch(cx)) return finish(cx, *wait);
  launch_missing_ranks(cx);
  // The API server refused a pod built from the user's spec (e.g. an invalid
  // template override): retrying cannot help.
  if (cx.error && !cx.error->transient() && cx.error->status != 403) return refuse_pods(cx);
  keep_podgroup_while_waiting(cx);
  report_pods_ready(cx);
  ReconcileResult result = report_progress(cx);
  // A placement timeout, a grow check or a pod's start deadline runs out
  // with nothing else changing.
  for (const auto& recheck : {cx.elastic_recheck, cx.start.recheck_in})
    if (recheck && (result.kind == Kind::Done || (result.kind == Kind::RequeueAfter && result.after > *recheck)))
      result = ReconcileResult::requeue_after(*recheck);
  return result;
}

std::optional<ReconcileResult> Reconciler::read_state(const std::string& key, Context& cx) {
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
  cx.spec = parse_spec(job.contains("spec") ? job["spec"] : Json(), &cx.spec_errors);
  for (auto& e : validate(cx.spec)) cx.spec_errors.push_back(std::move(e));
  for (auto& e : validate_name(cx.name, cx.spec)) cx.spec_errors.push_back(std::move(e));
  for (auto& e : check_pod_powers(cx.spec, powers_)) cx.spec_errors.push_back(std::move(e));
  std::vector<SpecError> status_errors;
  cx.status = parse_status(job.contains("status") ? job["status"] : Json::object(), &status_errors);
  if (!status_errors.empty()) spdlog::warn("{}: ignoring bad status fields: {}", key, describe(status_errors));
  cx.status_before = to_json(cx.status);
  cx.status.observed_generation = cx.generation;
  // An elastic job's gang has the size status.elastic says (the planned size
  // again when spec.replicas changed); everything below builds that gang.
  if (!cx.spec.elastic || !cx.spec_errors.empty()) {
    cx.status.elastic.reset();
  } else if (!cx.status.elastic || cx.status.elastic->planned_replicas != cx.spec.replicas) {
    ElasticStatus e = cx.status.elastic.value_or(ElasticStatus{});  // resizes so far are kept
    e.current_replicas = e.planned_replicas = cx.spec.replicas;
    cx.status.elastic = e;
  } else {
    cx.spec.replicas = cx.status.elastic->current_replicas;
  }
  if (cx.spec_errors.empty()) cx.status.ranks = cx.spec.world_size();
  // The nodes of stragglers replaced so far (spec.stragglers.action replace).
  if (cx.status.stragglers) cx.spec.avoid_nodes = cx.status.stragglers->avoided_nodes;
  const std::string uid = job["metadata"].value("uid", "");
  for (auto& pod : caches_.pods.by_index(cx.ns, cx.name))
    if (owned_by(*pod, uid)) cx.pods.push_back(pod);
  return std::nullopt;
}

ReconcileResult Reconciler::refuse_spec(Context& cx) {
  // The API server (< 1.25) could not enforce these rules; refuse the job
  // before anything is created.
  const std::string msg = describe(cx.spec_errors);
  cx.delete_pods(cx.pods);
  mark_terminal(cx, {.succeeded = false, .reason = kReasonInvalidSpec, .message = msg});
  return finish(cx, ReconcileResult::terminal(msg));
}

// Suspend: the pods go, everything else (attempt, restarts, children) stays.
ReconcileResult Reconciler::suspend(Context& cx) {
  TrainingJobStatus& st = cx.status;
  const std::vector<ObjectPtr> live = not_terminating(cx.pods);
  cx.delete_pods(live);
  const Condition* c = st.condition(kCondSuspended);
  if (!c || c->status != "True") {
    cx.event("Normal", kReasonSuspended, "suspended: deleted " + std::to_string(live.size()) + " pods");
    // A queue (Volcano's) stops counting a gang that has no PodGroup.
    cx.changes.delete_podgroup = true;
  }
  st.set_condition(kCondSuspended, true, kReasonSuspended, "spec.suspend is true", cx.generation, cx.now_s);
  st.set_condition(kCondReady, false, kReasonSuspended, "job is suspended", cx.generation, cx.now_s);
  set_phase(st, GangObservation{}, PhaseFacts{.suspended = true});
  st.ready_replicas = 0;
  st.attempt_start_time.clear();
  return finish(cx, ReconcileResult::done());
}

void Reconciler::resume_if_suspended(Context& cx) {
  TrainingJobStatus& st = cx.status;
  const Condition* c = st.condition(kCondSuspended);
  if (!c || c->status != "True") return;
  // A fresh attempt number keeps the new gang's rendezvous keys apart from the old one's.
  ++st.attempt;
  st.attempt_start_time.clear();
  st.set_condition(kCondSuspended, false, kReasonResumed, "spec.suspend is false", cx.generation, cx.now_s);
  cx.event("Normal", kReasonResumed, "resumed as attempt " + std::to_string(st.attempt));
}

// A spec change (replicas, image, worker config, ...) during an attempt
// relaunches the gang as a new attempt; it is not a failure, so it neither
// counts against maxRestarts nor waits for a backoff. True: the new attempt
// is to be written before anything else (see next_attempt).
bool Reconciler::relaunch_if_spec_changed(Context& cx) {
  TrainingJobStatus& st = cx.status;
  const std::string want = pod_spec_hash(cx.spec);
  for (auto& p : cx.pods) {
    if (terminating(*p) || label_int(*p, kLabelAttempt, -1) != st.attempt) continue;
    const Json& meta = (*p)["metadata"];
    const std::string have = meta.contains("annotations") ? meta["annotations"].value(kAnnotationSpecHash, "") : "";
    if (have == want) continue;
    next_attempt(cx);
    set_phase(st, GangObservation{}, PhaseFacts{});
    spdlog::info("{}: spec changed (generation {}), relaunching as attempt {}", cx.key(), cx.generation, st.attempt);
    cx.event("Normal", kReasonSpecChanged,
             "spec changed (generation " + std::to_string(cx.generation) + "): relaunching the gang as attempt " +
                 std::to_string(st.attempt));
    // A PodGroup the new gang does not use would keep its place in a queue
    // (Volcano's) for pods that no longer name it.
    cx.changes.delete_unwanted_podgroups = true;
    return true;
  }
  return false;
}

// Every relaunch (restart, spec change, resize, straggler replaced) starts
// the next attempt here and deletes nothing: the old gang's pods are stale
// from the moment this status is written, and the next reconcile deletes
// them (observe_gang). The other order lost the reason of a relaunch whose
// status write failed (a conflict with a second edit, an API server under
// load): the next reconcile saw ranks missing from a launched gang and
// restarted it as if a pod had been deleted, counting a restart for a spec
// change and dropping a resize.
void Reconciler::next_attempt(Context& cx) {
  TrainingJobStatus& st = cx.status;
  ++st.attempt;
  st.attempt_start_time.clear();
  st.ready_replicas = 0;
}

// Splits the pods into the current attempt's and older ones, and reduces the
// current ones to the facts the policies decide on.
void Reconciler::observe_gang(Context& cx) {
  const TrainingJobStatus& st = cx.status;
  for (auto& p : cx.pods) (label_int(*p, kLabelAttempt, -1) == st.attempt ? cx.current : cx.stale).push_back(p);

  GangObservation& gang = cx.gang;
  gang.replicas = cx.spec.replicas;
  gang.attempt = st.attempt;
  gang.launched = !st.attempt_start_time.empty();
  for (auto& p : cx.current) {
    if (terminating(*p)) {  // only we delete pods of the current attempt on purpose, and then bump it
      gang.leaving.push_back(observe_pod(*p, kContainerName));
      continue;
    }
    RankState r = observe_pod(*p, kContainerName);
    cx.present.insert(r.rank);
    gang.ranks.push_back(r);
  }
  if (gang.launched)
    for (int r = 0; r < gang.replicas; ++r)
      if (!cx.present.count(r)) gang.missing_ranks.push_back(r);  // the pod view is live here (see reconcile)
  // Rank 0's run has ended: its termination message holds the final
  // progress, newer than any scrape (which cannot reach it any more).
  for (const auto& r : gang.ranks)
    if (r.rank == 0 && r.exit_code)
      if (auto p = progress_from_termination_message(r.message)) {
        // Written once: updatedAt alone changing would rewrite status every reconcile.
        Json final_progress = progress_json(*p, cx.now_s), before = cx.status.extra.value("progress", Json::object());
        before["updatedAt"] = final_progress["updatedAt"];
        if (before != final_progress) cx.status.extra["progress"] = std::move(final_progress);
      }
}

ReconcileResult Reconciler::fail_gang(Context& cx, const RestartDecision& decision) {
  cx.delete_running_pods(still_running(cx.current));
  mark_terminal(cx, {.succeeded = false, .reason = decision.reason, .message = decision.message, .gang_judged = true});
  return finish(cx, requeue_for_ttl(cx.spec, cx.status, cx.now));
}

ReconcileResult Reconciler::restart_gang(Context& cx, const RestartDecision& decision) {
  TrainingJobStatus& st = cx.status;
  ++st.restarts;
  ++st.restarts_by_cause[cause_name(decision.cause)];
  st.last_restart_cause = cause_name(decision.cause);
  next_attempt(cx);
  st.last_restart_time = cx.now_s;
  set_phase(st, GangObservation{}, PhaseFacts{.restart_in_progress = true});  // the gang is stopping
  const int counted = counted_restarts(st);
  // A restart that does not count waits no backoff: nothing in the job failed.
  const auto backoff = counts_against_limit(decision.cause) ? restart_backoff(counted, cx.spec.restart)
                                                            : std::chrono::seconds(0);
  const std::string msg = decision.message + "; restarting the gang as attempt " + std::to_string(st.attempt) +
                          " in " + std::to_string(backoff.count()) + "s (restart " + std::to_string(st.restarts) +
                          ", " + std::to_string(counted) + " of maxRestarts " +
                          std::to_string(cx.spec.restart.max_restarts) + " counted)";
  st.set_condition(kCondRestarting, true, decision.reason, msg, cx.generation, cx.now_s);
  st.set_condition(kCondReady, false, decision.reason, "gang restarting", cx.generation, cx.now_s);
  cx.event("Warning", decision.reason, msg);
  spdlog::info("{}: {}", cx.key(), msg);
  if (metrics_) metrics_->add_restart(cause_name(decision.cause));
  return finish(cx, ReconcileResult::requeue_after(
                        std::max<std::chrono::milliseconds>(backoff, std::chrono::milliseconds(1))));
}

ReconcileResult Reconciler::complete(Context& cx) {
  const std::string msg = "all " + std::to_string(cx.gang.replicas) + " ranks exited 0";
  mark_terminal(cx, {.succeeded = true, .reason = kReasonCompleted, .message = msg, .gang_judged = true});
  return finish(cx, requeue_for_ttl(cx.spec, cx.status, cx.now));
}

std::optional<ReconcileResult> Reconciler::resize_gang(Context& cx) {
  if (!cx.spec.elastic || !cx.status.elastic) return std::nullopt;
  TrainingJobStatus& st = cx.status;
  ElasticStatus& el = *st.elastic;
  const bool all_ready = compute_phase(cx.gang, PhaseFacts{}).all_ready;
  const ElasticDecision d = decide_elastic(cx.spec, cx.gang, parse_time(st.attempt_start_time),
                                           parse_time(el.last_resize_time), all_ready, cx.now);
  cx.elastic_recheck = d.recheck_in;
  const Condition* before = st.condition(kCondFullSize);
  using K = ElasticDecision::Kind;
  if (d.kind == K::Keep) {
    const bool full = el.current_replicas == el.planned_replicas;
    if (full && all_ready && (!before || before->status != "True")) {
      const std::string msg = "all " + std::to_string(el.planned_replicas) + " planned pods placed and training";
      st.set_condition(kCondFullSize, true, kReasonPlannedSize, msg, cx.generation, cx.now_s);
      if (before) cx.event("Normal", kReasonPlannedSize, msg);  // back at full size after a resize
    }
    return std::nullopt;
  }
  if (d.kind == K::Hold) {
    if (!before || before->reason != d.reason) cx.event("Warning", d.reason, d.message);
    st.set_condition(kCondFullSize, false, d.reason, d.message, cx.generation, cx.now_s);
    return std::nullopt;
  }
  // Shrink or grow: the gang stops (its ranks checkpoint the step they agree
  // on as they stop) and relaunches at the new size as a new attempt; not a
  // restart, so nothing counts against maxRestarts.
  const bool grow = d.kind == K::Grow;
  relaunch_gang(cx);
  el.current_replicas = d.replicas;
  ++el.resizes;
  el.last_resize_time = cx.now_s;
  cx.spec.replicas = d.replicas;
  st.ranks = cx.spec.world_size();
  const std::string msg = d.message + "; relaunching as attempt " + std::to_string(st.attempt);
  st.set_condition(kCondFullSize, false, d.reason, msg, cx.generation, cx.now_s);
  st.set_condition(kCondReady, false, d.reason, grow ? "gang growing" : "gang shrinking", cx.generation, cx.now_s);
  cx.event(grow ? "Normal" : "Warning", d.reason, msg);
  spdlog::info("{}: {}", cx.key(), msg);
  if (metrics_) metrics_->add_resize(grow ? "grow" : "shrink");
  return finish(cx, ReconcileResult::requeue_after(std::chrono::seconds(1)));
}

void Reconciler::relaunch_gang(Context& cx) {
  next_attempt(cx);
  set_phase(cx.status, GangObservation{}, PhaseFacts{});
}

// The new gang waits until the old one is gone and the backoff has passed.
std::optional<ReconcileResult> Reconciler::wait_for_relaunch(Context& cx) {
  TrainingJobStatus& st = cx.status;
  const bool restarting = restart_in_progress(st);
  if (!cx.stale.empty()) {
    if (restarting) set_phase(st, GangObservation{}, PhaseFacts{.restart_in_progress = true});  // not launched yet
    return ReconcileResult::requeue_after(std::chrono::seconds(2));
  }
  if (restarting && cx.gang.ranks.empty()) {
    auto last = parse_time(st.last_restart_time);
    const auto backoff =
        last_restart_counted(st) ? restart_backoff(counted_restarts(st), cx.spec.restart) : std::chrono::seconds(0);
    // status times are whole seconds (RFC 3339): the restart happened within
    // the second after `last`, so waiting from its end keeps the whole
    // backoff (it once relaunched after 0.3 s of a 1 s backoff).
    auto ready_at = (last ? *last + (backoff.count() > 0 ? std::chrono::seconds(1) : std::chrono::seconds(0)) : cx.now) +
                    backoff;
    if (ready_at > cx.now) {
      set_phase(st, cx.gang, PhaseFacts{.restart_in_progress = true});
      return ReconcileResult::requeue_after(std::chrono::duration_cast<std::chrono::milliseconds>(ready_at - cx.now) +
                                            std::chrono::milliseconds(10));
    }
  }
  return std::nullopt;
}

void Reconciler::launch_missing_ranks(Context& cx) {
  TrainingJobStatus& st = cx.status;
  std::vector<int> missing;
  for (int rank = 0; rank < cx.spec.replicas; ++rank)
    if (!cx.present.count(rank)) missing.push_back(rank);
  const int created = create_pods(cx, missing);
  if (created > 0)
    cx.event("Normal", kReasonPodsCreated,
             "created " + std::to_string(created) + " pods for attempt " + std::to_string(st.attempt));
  if (static_cast<int>(cx.present.size()) == cx.spec.replicas && st.attempt_start_time.empty()) {
    st.attempt_start_time = cx.now_s;
    if (st.start_time.empty()) st.start_time = cx.now_s;
  }
}

ReconcileResult Reconciler::refuse_pods(Context& cx) {
  const std::string msg = "creating pods failed: " + cx.error->message;
  cx.error.reset();  // answered here: terminal with this message, not by finish()
  mark_terminal(cx, {.succeeded = false, .reason = kReasonCreateFailed, .message = msg});
  return finish(cx, ReconcileResult::terminal(msg));
}

ReconcileResult Reconciler::report_progress(Context& cx) {
  TrainingJobStatus& st = cx.status;
  const bool restarting = restart_in_progress(st);
  const PhaseView view = set_phase(st, cx.gang, PhaseFacts{.restart_in_progress = restarting});
  st.ready_replicas = view.ready;
  set_scheduling_condition(cx);
  // Ready pods are training ranks: with metrics on, a pod's readiness probe
  // is the worker's /ready, which passes once its rank has finished a step.
  const bool one = cx.spec.ranks_per_pod() == 1;
  if (view.all_ready) {
    st.set_condition(kCondReady, true, kReasonAllRanksRunning,
                     one ? "all ranks training"
                         : "all pods training (" + std::to_string(cx.spec.world_size()) + " ranks)",
                     cx.generation, cx.now_s);
    if (restarting)
      st.set_condition(kCondRestarting, false, kReasonAllRanksRunning,
                       "attempt " + std::to_string(st.attempt) + " training", cx.generation, cx.now_s);
  } else if (!cx.start.blocked_reason.empty()) {
    // A pod on its node cannot start its worker (the image, its config):
    // Ready says which and why, and a Warning event says it once.
    const Condition* before = st.condition(kCondReady);
    if (!before || before->reason != cx.start.blocked_reason)
      cx.event("Warning", cx.start.blocked_reason, cx.start.blocked_message);
    st.set_condition(kCondReady, false, cx.start.blocked_reason, cx.start.blocked_message, cx.generation, cx.now_s);
  } else {
    st.set_condition(kCondReady, false, kReasonWaitingForRanks,
                     std::to_string(view.ready) + " of " + std::to_string(cx.spec.replicas) +
                         (one ? " ranks training, " : " pods training, ") + std::to_string(view.running) +
                         " running",
                     cx.generation, cx.now_s);
  }
  // A PodGroup API may be installed later: look again. A gang that waits
  // for its scheduler is looked at again too: its PodGroup is not watched.
  if (!cx.podgroup_problem.empty() || (cx.podgroup_ensured && !view.all_ready))
    return finish(cx, ReconcileResult::requeue_after(std::chrono::seconds(30)));
  if (!view.all_ready) return finish(cx, ReconcileResult::done());
  // Observe (the poller's figures; it enqueues the job when it has new
  // ones), then decide and apply.
  observe_ranks(cx);
  if (auto replaced = name_stragglers(cx)) return *replaced;
  observe_tuning(cx);
  ReconcileResult result = tune_bucket_size(cx);
  if (cx.scrape) cx.scrape->tuning = cx.spec.bucket_tuning.enabled && tuner::needs_samples(cx.status.tuning);
  return finish(cx, result);
}

void Reconciler::set_scheduling_condition(Context& cx) {
  const auto view = scheduling_condition(cx.spec, cx.name, cx.gang, cx.podgroup_problem);
  if (!view) return;
  TrainingJobStatus& st = cx.status;
  if (cx.scheduling_reported) {
    // Again, after the PodGroup write (finish()): from the condition as it
    // was before this reconcile, the first report's event withdrawn.
    restore_condition(st, kCondGangScheduled, cx.scheduling_reported->before);
    if (cx.scheduling_reported->event) drop_event(cx, *cx.scheduling_reported->event);
    cx.scheduling_reported->event.reset();
  } else {
    const Condition* c = st.condition(kCondGangScheduled);
    cx.scheduling_reported = Context::Reported{c ? std::optional<Condition>(*c) : std::nullopt, std::nullopt};
  }
  const Condition* before = st.condition(kCondGangScheduled);
  const bool changed = !before || before->reason != view->reason;
  st.set_condition(kCondGangScheduled, view->placed, view->reason, view->message, cx.generation, cx.now_s);
  if (!changed) return;
  if (view->reason == kReasonPodGroupUnavailable || view->reason == kReasonUnschedulable)
    cx.scheduling_reported->event.emplace("Warning", view->reason, view->message);
  else if (view->placed)
    cx.scheduling_reported->event.emplace("Normal", view->reason, view->message);
  if (cx.scheduling_reported->event) cx.events.push_back(*cx.scheduling_reported->event);
}

void Reconciler::observe_ranks(Context& cx) {
  const int port = cx.spec.metrics_port();
  if (!poller_ || port <= 0) return;
  ScrapeTarget& t = cx.scrape.emplace();
  t.uid = (*cx.job)["metadata"].value("uid", "");
  t.attempt = cx.status.attempt;
  t.port = port;
  t.progress = poller_->options().progress_every.count() > 0;
  t.tuning = cx.spec.bucket_tuning.enabled && tuner::needs_samples(cx.status.tuning);
  t.stragglers = cx.spec.stragglers.has_value();
  for (const auto& p : cx.current) {
    if (terminating(*p) || !(*p).contains("status")) continue;
    const Json& ps = (*p)["status"];
    if (ps.value("phase", "") != "Running" || ps.value("podIP", "").empty()) continue;
    t.ranks.emplace_back(label_int(*p, kLabelRank, -1), ps.value("podIP", ""));
  }
  cx.figures = poller_->latest(cx.key());
  if (cx.figures && cx.figures->uid != t.uid) cx.figures.reset();  // another job of the same name
  if (cx.figures) {
    // Another process's metrics on a rank's port are never the job's figures:
    // say so, once per change.
    const Condition* before = cx.status.condition(kCondMetrics);
    if (cx.figures->foreign) {
      const std::string msg = "a rank's metrics port answered with metrics that are not its own, so they are not "
                              "used: " + *cx.figures->foreign;
      if (!before || before->status != "False" || before->message != msg) {
        cx.status.set_condition(kCondMetrics, false, kReasonForeignMetrics, msg, cx.generation, cx.now_s);
        cx.event("Warning", kReasonForeignMetrics, msg);
      }
    } else if (before && before->status == "False") {
      const std::string msg = "every rank's metrics are the job's own again";
      cx.status.set_condition(kCondMetrics, true, kReasonOwnMetrics, msg, cx.generation, cx.now_s);
      cx.event("Normal", kReasonOwnMetrics, msg);
    }
  }
  if (!t.progress || !cx.figures || !cx.figures->progress) return;
  // Rank 0's latest scrape, unless status holds newer figures (the final
  // progress of a previous attempt's termination message, another replica's).
  const ScrapedProgress& got = *cx.figures->progress;
  const std::string at = format_time(got.at);
  std::optional<TimePoint> have;
  if (auto it = cx.status.extra.find("progress"); it != cx.status.extra.end() && it->is_object())
    if (auto u = it->find("updatedAt"); u != it->end() && u->is_string()) have = parse_time(u->get<std::string>());
  if (!have || *have < *parse_time(at)) cx.status.extra["progress"] = progress_json(got.progress, at);
}

void Reconciler::tell_poller(const std::string& key, const Context& cx, const ReconcileResult& result) {
  if (!poller_) return;
  const bool gone = !cx.job || terminating(*cx.job) || result.kind == ReconcileResult::Kind::NotFound ||
                    cx.status.phase == kPhaseSucceeded || cx.status.phase == kPhaseFailed;
  if (gone) {
    poller_->forget(key);
    std::lock_guard lock(tuning_mu_);
    tuning_seen_.erase(key);
    // A deleted job's tuner series go with it; a finished one keeps its last figures.
    const bool deleted = !cx.job || terminating(*cx.job) || result.kind == ReconcileResult::Kind::NotFound;
    if (deleted && tuner_metrics_) tuner_metrics_->forget(cx.ns, cx.name);
  } else if (cx.scrape) {
    poller_->watch(key, *cx.scrape);
  } else {
    poller_->pause(key);  // not every rank runs: nothing to read until they do
  }
}

void Reconciler::mark_terminal(Context& cx, const Terminal& how) {
  TrainingJobStatus& st = cx.status;
  set_phase(st, GangObservation{}, PhaseFacts{.failed = !how.succeeded, .succeeded = how.succeeded});
  st.completion_time = cx.now_s;
  st.set_condition(how.succeeded ? kCondSucceeded : kCondFailed, true, how.reason, how.message, cx.generation,
                   cx.now_s);
  if (how.gang_judged) {
    st.ready_replicas = 0;
    st.set_condition(kCondReady, false, how.reason, how.succeeded ? "job completed" : "job failed", cx.generation,
                     cx.now_s);
  }
  if (how.succeeded && st.condition(kCondRestarting))
    st.set_condition(kCondRestarting, false, how.reason, "job completed after a gang restart", cx.generation,
                     cx.now_s);
  cx.event(how.succeeded ? "Normal" : "Warning", how.reason, how.message);
  // A finished gang holds no place in a queue.
  cx.changes.delete_podgroup = true;
  // A job that ends mid-search is not searching any more: its ranks ran the
  // size under trial to the end, and no choice was made.
  if (st.tuning && st.tuning->state == TuningState::Searching) {
    st.tuning->state = TuningState::Stopped;
    cx.event("Normal", tuner::kReasonStopped,
             "the job ended before tuning converged; its ranks ran " +
                 tuner::format_mb(st.tuning->current_bucket_mb) + " MiB last");
  }
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
  // As cached: a rank the cache still shows running may have failed since
  // (the verdict can come from a live read), and a failed rank stays for
  // its logs.
  if (cx.status.phase == kPhaseFailed) cx.delete_running_pods(still_running(cx.pods));
  finish_workload(cx);
  if (!parse_time(cx.status.completion_time)) cx.status.completion_time = cx.now_s;  // the TTL counts from here
  auto ttl = ttl_remaining(cx.spec, cx.status, cx.now);
  cx.changes.delete_job = ttl && ttl->count() <= 0;
  return finish(cx, ttl && !cx.changes.delete_job ? ReconcileResult::requeue_after(*ttl) : ReconcileResult::done());
}

void Reconciler::apply_changes(Context& cx) {
  Context::Changes& c = cx.changes;
  // Deletes first: a pod deleted here for its rank is created again by a
  // later reconcile, never before it is gone.
  remove_pods(cx, c.delete_pods);
  remove_pods(cx, c.delete_running_pods, /*as_cached=*/true);
  // A PodGroup the API server refuses (not served any more, not this job's)
  // is reported in this status write, as GangScheduled False.
  if (c.keep_podgroup && !ensure_podgroup(cx) && !cx.podgroup_problem.empty()) set_scheduling_condition(cx);
  if (c.delete_unwanted_podgroups) remove_unwanted_podgroups(cx);
  if (c.delete_podgroup) remove_podgroup(cx);
  if (c.bucket_cap_mb) write_bucket_cap(cx, *c.bucket_cap_mb);
  apply_workload_changes(cx);
}

ReconcileResult Reconciler::finish(Context& cx, ReconcileResult result) {
  apply_changes(cx);
  if (cx.changes.delete_job) {
    auto res = api_.remove(kube::kTrainingJobs, cx.ns, cx.name, kube::Propagation::Background,
                           (*cx.job)["metadata"].value("uid", ""));
    if (!res && !res.error().not_found()) return ReconcileResult::transient(res.error().message);
    spdlog::info("deleted {}/{}: ttlSecondsAfterFinished expired", cx.ns, cx.name);
    return ReconcileResult::done();
  }
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
