// The queue step of reconcile() (--kueue): a job labelled with Kueue's
// queue-name runs only while Kueue admits its Workload (queue_policy.h).
// Waiting, the job is Queued and its Admitted condition carries Kueue's own
// words; evicted (preempted, pods not ready in time), its gang stops the way
// a suspend stops it (the ranks checkpoint as they stop), and once no pod
// runs the operator gives the quota back and Kueue queues the Workload
// again; admitted again, a new attempt resumes from the checkpoint.
#include <spdlog/spdlog.h>

#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "trainingjob/queue_policy.h"
#include "trainingjob/reconciler.h"
#include "trainingjob/reconciler_context.h"

namespace weft::tj {
using kube::ObjectPtr;
using namespace detail;

namespace {

std::string queue_of(const Json& job) {
  const Json labels = job["metadata"].value("labels", Json::object());
  auto it = labels.find(kLabelKueueQueue);
  return it != labels.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// What a stop for the queue says: the Admitted and Ready conditions, phase
// Queued, one event per change of reason (Kueue's changing words, how much
// quota is missing, only update the condition). Reported again, from the
// Admitted condition as it was before the stop, when finish() learns that
// the API server refused the Workload the stop said was created.
void report_queue_stop(ReconcileContext& cx, const std::string& reason, const std::string& message) {
  TrainingJobStatus& st = cx.status;
  if (cx.queue_reported) {
    restore_condition(st, kCondAdmitted, cx.queue_reported->before);
    if (cx.queue_reported->event) drop_event(cx, *cx.queue_reported->event);
    cx.queue_reported->event.reset();
  } else {
    const Condition* c = st.condition(kCondAdmitted);
    cx.queue_reported = ReconcileContext::Reported{c ? std::optional<Condition>(*c) : std::nullopt, std::nullopt};
  }
  const Condition* c = st.condition(kCondAdmitted);
  if (c && c->status == "True")
    cx.queue_reported->event.emplace("Normal", reason,
                                     message + ": deleted " + std::to_string(cx.queue_stop_deleted) + " pods");
  else if (!c || c->reason != reason)
    cx.queue_reported->event.emplace("Normal", reason, message);
  if (cx.queue_reported->event) cx.events.push_back(*cx.queue_reported->event);
  st.set_condition(kCondAdmitted, false, reason, message, cx.generation, cx.now_s);
  st.set_condition(kCondReady, false, reason, "waiting for Kueue", cx.generation, cx.now_s);
  st.ready_replicas = 0;
  set_phase(st, GangObservation{}, PhaseFacts{.queued = true});
}

}  // namespace

bool Reconciler::queued(const Context& cx) const { return caches_.workloads && !queue_of(*cx.job).empty(); }

ObjectPtr Reconciler::find_workload(const Context& cx) const {
  const std::string uid = (*cx.job)["metadata"].value("uid", "");
  for (auto& w : caches_.workloads->by_index(cx.ns, cx.name))
    if (owned_by(*w, uid) && !terminating(*w)) return w;
  return nullptr;
}

std::optional<ReconcileResult> Reconciler::gate_on_queue(Context& cx) {
  if (!queued(cx)) return std::nullopt;
  const std::string queue = queue_of(*cx.job);
  cx.spec.queued_by_workload = true;
  cx.workload = find_workload(cx);
  if (cx.workload && workload_outdated(*cx.workload, cx.spec)) {
    // Kueue admitted another gang (other pods, requests or image): the new
    // one queues under a new Workload, created once this one is gone.
    cx.changes.delete_workload = cx.workload;
    cx.workload = nullptr;
    return stop_for_queue(cx, kReasonWaitingForAdmission, "the gang changed; its Workload is replaced");
  }
  if (!cx.workload) {
    if (auto problem = create_workload(cx, queue))
      return stop_for_queue(cx, kReasonWorkloadUnavailable, *problem);
    return stop_for_queue(cx, kReasonWorkloadCreated,
                          "Workload " + workload_name(cx.name, (*cx.job)["metadata"].value("uid", "")) +
                              " created in LocalQueue " + queue + "; waiting for Kueue");
  }
  const WorkloadState w = read_workload(*cx.workload);
  const std::string wl_name = (*cx.workload)["metadata"].value("name", "");
  if (w.evicted && (w.quota_reserved || w.admitted)) {
    // Kueue gives the quota to the next workload only once the gang is gone:
    // the requeue waits until no pod of the job runs.
    bool running = false;
    for (const auto& p : cx.pods)
      if (!pod_finished(*p)) running = true;
    if (!running) cx.changes.workload_status = requeue_patch(*cx.workload, cx.now_s);
    return stop_for_queue(cx, kReasonEvicted,
                          "evicted by Kueue (" + w.evicted_reason + "): " + w.evicted_message +
                              (running ? "; stopping the gang" : "; requeued"));
  }
  if (!w.admitted) {
    if (w.finished) return stop_for_queue(cx, kReasonWaitingForAdmission, "Workload " + wl_name + " is finished");
    // Kueue keeps Evicted True until it admits the Workload again.
    const std::string why = w.waiting.empty() ? "waiting for Kueue to consider Workload " + wl_name : w.waiting;
    if (w.evicted) return stop_for_queue(cx, kReasonEvicted, "evicted by Kueue (" + w.evicted_reason + "), requeued: " + why);
    // Until Kueue has said why the Workload waits, it is just created.
    return stop_for_queue(cx, w.waiting.empty() ? kReasonWorkloadCreated : kReasonWaitingForAdmission, why);
  }

  // Admitted: where the pods go comes from the assigned flavors, read when
  // pods are to be created.
  TrainingJobStatus& st = cx.status;
  std::string message = "admitted by ClusterQueue " + w.cluster_queue;
  if (!w.flavors.empty()) message += " (ResourceFlavor " + joined(w.flavors) + ")";
  const Condition* c = st.condition(kCondAdmitted);
  if (!c || c->status != "True") cx.event("Normal", kReasonAdmitted, message);
  st.set_condition(kCondAdmitted, true, kReasonAdmitted, message, cx.generation, cx.now_s);
  int live = 0;
  for (const auto& p : cx.pods)
    if (!terminating(*p) && label_int(*p, kLabelAttempt, -1) == st.attempt) ++live;
  if (live >= cx.spec.replicas) return std::nullopt;
  FlavorPlacement placement;
  for (const auto& f : w.flavors) {
    auto flavor = api_.get(kube::kResourceFlavors, "", f);
    if (!flavor) {
      cx.note(flavor.error());
      return finish(cx, ReconcileResult::done());
    }
    std::string conflict;
    if (!add_flavor(placement, *flavor, &conflict)) {
      cx.event("Warning", kReasonWorkloadUnavailable, conflict);
      return finish(cx, ReconcileResult::done());
    }
  }
  cx.spec.queue_node_selector = placement.node_selector;
  cx.spec.queue_tolerations = placement.tolerations;
  return std::nullopt;
}

// Not admitted (yet, or any more): no pod runs. The first stop of an
// admitted gang ends its attempt, as a suspend does: the next admission
// launches a new attempt, which resumes from the checkpoint.
ReconcileResult Reconciler::stop_for_queue(Context& cx, const std::string& reason, const std::string& message) {
  TrainingJobStatus& st = cx.status;
  std::vector<ObjectPtr> live;
  for (const auto& p : cx.pods)
    if (!terminating(*p) && !pod_finished(*p)) live.push_back(p);
  cx.delete_pods(live);
  cx.queue_stop_deleted = static_cast<int>(live.size());
  const Condition* c = st.condition(kCondAdmitted);
  if (c && c->status == "True") {
    ++st.attempt;
    st.attempt_start_time.clear();
  }
  report_queue_stop(cx, reason, message);
  return finish(cx, ReconcileResult::done());
}

// The Workload describes the gang's pods as rank 0's pod is built; a
// WorkloadPriorityClass named by the job's label gives its priority.
std::optional<std::string> Reconciler::create_workload(Context& cx, const std::string& queue) {
  std::optional<WorkloadPriority> priority;
  const Json labels = (*cx.job)["metadata"].value("labels", Json::object());
  if (auto it = labels.find(kLabelKueuePriority); it != labels.end() && it->is_string()) {
    auto cls = api_.get(kube::kWorkloadPriorityClasses, "", it->get<std::string>());
    if (!cls) {
      if (cls.error().not_found()) return "WorkloadPriorityClass " + it->get<std::string>() + " not found";
      cx.note(cls.error());
      return "reading WorkloadPriorityClass " + it->get<std::string>() + ": " + cls.error().message;
    }
    priority = WorkloadPriority{it->get<std::string>(), cls->value("value", 0)};
  }
  const Json pod = build_pod(*cx.job, cx.spec, 0, cx.status.attempt);
  cx.changes.create_workload = build_workload(*cx.job, cx.spec, pod, queue, priority);
  return std::nullopt;
}

// waitForPodsReady: Kueue evicts an admitted gang whose pods do not all run
// in time; the operator tells it when they do.
void Reconciler::report_pods_ready(Context& cx) {
  if (!cx.workload) return;
  int running = 0;
  for (const auto& r : cx.gang.ranks)
    if (!r.terminating && r.phase == "Running") ++running;
  if (auto patch = pods_ready_patch(*cx.workload, running >= cx.spec.replicas, cx.now_s))
    cx.changes.workload_status = std::move(*patch);
}

// A finished job gives its quota back.
void Reconciler::finish_workload(Context& cx) {
  if (!queued(cx)) return;
  ObjectPtr wl = find_workload(cx);
  if (!wl || read_workload(*wl).finished) return;
  const Condition* c = cx.status.condition(cx.status.phase == kPhaseSucceeded ? kCondSucceeded : kCondFailed);
  cx.workload = wl;
  cx.changes.workload_status =
      finished_patch(*wl, cx.status.phase == kPhaseSucceeded, c ? c->message : cx.status.phase, cx.now_s);
}

void Reconciler::apply_workload_changes(Context& cx) {
  Context::Changes& c = cx.changes;
  if (c.create_workload) {
    // gate_on_queue reported it created; a refusal is reported instead.
    auto res = api_.create(kube::kWorkloads, cx.ns, *c.create_workload);
    std::optional<std::string> problem;
    if (!res && !res.error().already_exists()) {
      if (res.error().not_found()) {
        problem = "the Workload API (kueue.x-k8s.io/v1beta2) is not served: is Kueue installed? " + res.error().message;
      } else {
        cx.note(res.error());
        problem = "creating the Workload: " + res.error().message;
      }
    }
    if (problem) report_queue_stop(cx, kReasonWorkloadUnavailable, *problem);
  }
  if (c.delete_workload) {
    const Json& meta = (*c.delete_workload)["metadata"];
    auto res = api_.remove(kube::kWorkloads, cx.ns, meta.value("name", ""), kube::Propagation::Background,
                           meta.value("uid", ""));
    if (!res && !res.error().not_found()) cx.note(res.error());
  }
  if (c.workload_status && cx.workload) {
    auto res = api_.merge_patch(kube::kWorkloads, cx.ns, (*cx.workload)["metadata"].value("name", ""),
                                *c.workload_status, true);
    if (!res) cx.note(res.error());
  }
}

}  // namespace weft::tj
