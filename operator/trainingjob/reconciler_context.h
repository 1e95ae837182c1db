// Private to the reconciler's two .cc files: the state of one reconcile and
// small readers of object metadata. Not part of the operator's interface.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kube/informer.h"
#include "trainingjob/gang.h"
#include "trainingjob/reconciler.h"
#include "trainingjob/scrape_poller.h"
#include "trainingjob/start_policy.h"
#include "trainingjob/types.h"

namespace weft::tj {

struct Reconciler::Context {
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
  bool podgroup_ensured = false;                   // ensure_podgroup() ran in this reconcile
  kube::ObjectPtr workload;                        // a queued job's Workload (reconciler_queue.cc)
  std::optional<kube::ApiError> error;             // first API error that should fail the reconcile
  std::vector<std::tuple<std::string, std::string, std::string>> events;  // type, reason, message
  // What the steps decided to delete or patch, applied by finish() before the
  // status write (the events after it): a step says what it wants changed
  // and goes on deciding; none deletes or patches in the middle of a
  // decision. Creates stay with the step that needs them (launch), and
  // ensure_children's creates and patches are the children's mechanics.
  struct Changes {
    std::vector<kube::ObjectPtr> delete_pods;   // each by name, with its uid as precondition
    // Pods to stop only as cached (their resourceVersion a precondition too):
    // judged still running from the cache, and kept for their logs should
    // they have finished meanwhile (the Conflict's watch event brings a
    // reconcile that judges again).
    std::vector<kube::ObjectPtr> delete_running_pods;
    bool delete_podgroup = false;               // the gang is gone for good (suspended, finished)
    bool delete_unwanted_podgroups = false;     // the kinds a changed spec no longer asks for
    std::optional<std::string> bucket_cap_mb;   // the tuner's size for the ConfigMap
    bool delete_job = false;                    // ttlSecondsAfterFinished ran out: nothing else is written
    kube::ObjectPtr delete_workload;            // a queued job's Workload describing an old gang
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
  void note(const kube::ApiError& e) {
    if (!error) error = e;
  }
  std::string key() const { return ns + "/" + name; }
};

namespace detail {

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
