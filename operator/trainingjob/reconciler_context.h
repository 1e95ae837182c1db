// Private to the reconciler's .cc files: the state of one reconcile (what
// the steps observed and decided, and the changes finish() applies) and small
// readers of object metadata. Not part of the operator's interface.
//
// It depends on nothing of the Reconciler: reconciler.h only forward-declares
// ReconcileContext (as Reconciler::Context), so the includes inside operator/
// point one way, from the reconciler to what it uses.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kube/informer.h"
#include "kube/kube_api.h"
#include "trainingjob/clock.h"
#include "trainingjob/gang.h"
#include "trainingjob/phase_policy.h"
#include "trainingjob/scrape_poller.h"
#include "trainingjob/start_policy.h"
#include "trainingjob/types.h"
#include "tuner/bucket_tuner.h"

namespace weft::tj {

struct ReconcileContext {
  std::string ns, name;
  kube::ObjectPtr job;
  TrainingJobSpec spec;
  std::vector<SpecError> spec_errors;              // parse and validate; any refuses the job
  TrainingJobStatus status;
  Json status_before;
  long generation = 0;
  TimePoint now;
  std::string now_s;
  std::vector<kube::ObjectPtr> pods;               // owned by this job (uid match)
  // Set by observe_gang():
  std::vector<kube::ObjectPtr> current, stale;     // pods of status.attempt / of older attempts
  GangObservation gang;                            // the current attempt's live pods
  std::set<int> present;                           // ranks of the current attempt with a live pod
  // Set by observe_ranks() while every rank runs: what the scrape poller is
  // to read of this job, and its latest figures.
  std::optional<ScrapeTarget> scrape;
  std::optional<ScrapedFigures> figures;
  // Set by observe_tuning(): the running ranks' samples for the tuner.
  std::vector<tuner::RankObservation> tuning_ranks;
  // spec.elastic: when the size decision could change on its own (a timeout).
  std::optional<std::chrono::milliseconds> elastic_recheck;
  // Pods on their node whose worker has not started (start_policy.h): what
  // blocks them, and when a start deadline passes.
  StartDecision start;
  bool secret_ensured = false;                     // this reconcile created the Secret or found it there
  std::string podgroup_problem;                    // why the gang's PodGroup could not be created (then no pods)
  bool podgroup_ensured = false;                   // ensure_podgroup() ran in this reconcile, or finish() runs it
  kube::ObjectPtr workload;                        // a queued job's Workload (reconciler_queue.cc)
  std::optional<kube::ApiError> error;             // first API error that should fail the reconcile
  std::vector<std::tuple<std::string, std::string, std::string>> events;  // type, reason, message
  // What the steps decided to write, applied by finish() before the status
  // write (the events after it): a step says what it wants changed and goes
  // on deciding; no decision step writes to the API server. Only two kinds of
  // writes are not recorded here: the launch's creates (the Secret, the
  // PodGroup before the first pod, the pods: create_pods), whose answers say
  // which ranks exist, and ensure_children's creates and patches, the
  // children's mechanics before anything is decided.
  struct Changes {
    // Each by name, with its uid as precondition. Pods of older attempts
    // (stale) are among them, also one a create found in its rank's place
    // (pod_there_is_current): deleted here, its rank is created by a later
    // reconcile, so a stale pod is always gone before its replacement is made.
    std::vector<kube::ObjectPtr> delete_pods;
    // Pods to stop only as cached (their resourceVersion a precondition too):
    // judged still running from the cache, and kept for their logs should
    // they have finished meanwhile (the Conflict's watch event brings a
    // reconcile that judges again).
    std::vector<kube::ObjectPtr> delete_running_pods;
    // The gang waits for its scheduler: its PodGroup is created again, or its
    // spec brought back to the job's (keep_podgroup_while_waiting). A problem
    // that answer reveals is reported before the status write (finish()).
    bool keep_podgroup = false;
    bool delete_podgroup = false;               // the gang is gone for good (suspended, finished)
    bool delete_unwanted_podgroups = false;     // the kinds a changed spec no longer asks for
    std::optional<std::string> bucket_cap_mb;   // the tuner's size for the ConfigMap
    bool delete_job = false;                    // ttlSecondsAfterFinished ran out: nothing else is written
    kube::ObjectPtr delete_workload;            // a queued job's Workload describing an old gang
    // A queued job's new Workload (gate_on_queue); when the API server
    // refuses it, the Admitted condition says why (finish()).
    std::optional<Json> create_workload;
    std::optional<Json> workload_status;        // a merge patch of Context::workload's status
  } changes;

  void event(const std::string& type, const std::string& reason, const std::string& message) {
    events.emplace_back(type, reason, message);
  }
  void delete_pods(const std::vector<kube::ObjectPtr>& pods) {
    changes.delete_pods.insert(changes.delete_pods.end(), pods.begin(), pods.end());
  }
  void delete_running_pods(const std::vector<kube::ObjectPtr>& pods) {
    changes.delete_running_pods.insert(changes.delete_running_pods.end(), pods.begin(), pods.end());
  }
  // What a step reported that a write's answer may revise: finish() reports
  // again from the condition as it was before the step, and the step's event
  // gives way to the revised one.
  struct Reported {
    std::optional<Condition> before;                                 // the condition before the step set it
    std::optional<std::tuple<std::string, std::string, std::string>> event;  // the step's event, if any
  };
  std::optional<Reported> scheduling_reported;  // set_scheduling_condition (GangScheduled)
  std::optional<Reported> queue_reported;       // report_queue_stop (Admitted)
  int queue_stop_deleted = 0;                   // pods stop_for_queue deleted, for its message

  void note(const kube::ApiError& e) {
    if (!error) error = e;
  }
  std::string key() const { return ns + "/" + name; }
};

namespace detail {

// The only place status.phase is written: every phase comes from the phase
// policy.
inline PhaseView set_phase(TrainingJobStatus& st, const GangObservation& gang, const PhaseFacts& facts) {
  PhaseView view = compute_phase(gang, facts);
  st.phase = view.phase;
  return view;
}

// Puts a condition back as it was before a step set it (none: removed).
inline void restore_condition(TrainingJobStatus& st, const std::string& type, const std::optional<Condition>& before) {
  if (!before) {
    st.remove_condition(type);
    return;
  }
  for (auto& c : st.conditions)
    if (c.type == type) c = *before;
}

// Drops the first queued event equal to e (a report being revised).
inline void drop_event(ReconcileContext& cx, const std::tuple<std::string, std::string, std::string>& e) {
  for (auto it = cx.events.begin(); it != cx.events.end(); ++it)
    if (*it == e) {
      cx.events.erase(it);
      return;
    }
}

inline int label_int(const Json& obj, const char* key, int fallback) {
  const Json& meta = obj["metadata"];
  if (!meta.contains("labels")) return fallback;
  auto it = meta["labels"].find(key);
  if (it == meta["labels"].end() || !it->is_string()) return fallback;
  try {
    return std::stoi(it->get<std::string>());
  } catch (const std::exception&) {
    return fallback;
  }
}

inline bool terminating(const Json& obj) {
  return obj["metadata"].contains("deletionTimestamp") && !obj["metadata"]["deletionTimestamp"].is_null();
}

inline bool owned_by(const Json& obj, const std::string& uid) {
  const Json& meta = obj["metadata"];
  if (!meta.contains("ownerReferences")) return false;
  for (const auto& ref : meta["ownerReferences"])
    if (ref.value("uid", "") == uid) return true;
  return false;
}

inline bool pod_finished(const Json& pod) {
  const std::string phase = pod.contains("status") ? pod["status"].value("phase", "") : "";
  return phase == "Succeeded" || phase == "Failed";
}

}  // namespace detail

}  // namespace weft::tj
