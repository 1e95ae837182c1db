#include "trainingjob/queue_policy.h"

#include <algorithm>

#include "trainingjob/builders.h"
#include "trainingjob/constants.h"

namespace weft::tj {
namespace {

const Json* find_condition(const Json& workload, const std::string& type) {
  if (!workload.contains("status") || !workload["status"].contains("conditions")) return nullptr;
  for (const auto& c : workload["status"]["conditions"])
    if (c.is_object() && c.value("type", "") == type) return &c;
  return nullptr;
}

bool condition_true(const Json& workload, const std::string& type) {
  const Json* c = find_condition(workload, type);
  return c && c->value("status", "") == "True";
}

struct Cond {
  std::string type, status, reason, message;
};

// metav1.Condition semantics: lastTransitionTime moves only when the status
// does; observedGeneration is the Workload's.
Json with_conditions(const Json& workload, const std::vector<Cond>& set, const std::string& now) {
  Json conditions = Json::array();
  if (workload.contains("status") && workload["status"].contains("conditions"))
    conditions = workload["status"]["conditions"];
  const long gen = workload["metadata"].value("generation", 0L);
  for (const Cond& c : set) {
    Json entry = {{"type", c.type},       {"status", c.status},          {"reason", c.reason},
                  {"message", c.message}, {"lastTransitionTime", now}, {"observedGeneration", gen}};
    auto it = std::find_if(conditions.begin(), conditions.end(),
                           [&](const Json& e) { return e.is_object() && e.value("type", "") == c.type; });
    if (it == conditions.end()) {
      conditions.push_back(entry);
      continue;
    }
    if (it->value("status", "") == c.status && it->contains("lastTransitionTime"))
      entry["lastTransitionTime"] = (*it)["lastTransitionTime"];
    *it = entry;
  }
  return conditions;
}

Json status_patch(const Json& workload, Json status) {
  return {{"metadata", {{"resourceVersion", workload["metadata"].value("resourceVersion", "")}}},
          {"status", std::move(status)}};
}

}  // namespace

WorkloadState read_workload(const Json& workload) {
  WorkloadState s;
  const Json status = workload.value("status", Json::object());
  const bool has_admission = status.contains("admission") && status["admission"].is_object();
  s.quota_reserved = condition_true(workload, "QuotaReserved") && has_admission;
  s.admitted = condition_true(workload, "Admitted") && has_admission;
  s.finished = condition_true(workload, "Finished");
  s.pods_ready = condition_true(workload, "PodsReady");
  if (const Json* ev = find_condition(workload, "Evicted"); ev && ev->value("status", "") == "True") {
    s.evicted = true;
    s.evicted_reason = ev->value("reason", "");
    s.evicted_message = ev->value("message", "");
  }
  if (has_admission) {
    const Json& adm = status["admission"];
    s.cluster_queue = adm.value("clusterQueue", "");
    if (adm.contains("podSetAssignments"))
      for (const auto& psa : adm["podSetAssignments"])
        if (psa.contains("flavors") && psa["flavors"].is_object())
          for (const auto& f : psa["flavors"])
            if (f.is_string() && std::find(s.flavors.begin(), s.flavors.end(), f.get<std::string>()) == s.flavors.end())
              s.flavors.push_back(f.get<std::string>());
  }
  // Why it waits: Kueue writes it on QuotaReserved (no quota, no queue, an
  // inactive ClusterQueue) or, with quota reserved, on Admitted (checks).
  for (const char* type : {"QuotaReserved", "Admitted"}) {
    const Json* c = find_condition(workload, type);
    if (c && c->value("status", "") == "False" && !c->value("message", "").empty()) {
      s.waiting = c->value("message", "");
      break;
    }
  }
  return s;
}

std::string workload_name(const std::string& job, const std::string& uid) {
  return "trainingjob-" + job + "-" + uid.substr(0, 5);
}

Json build_workload(const Json& job, const TrainingJobSpec& spec, const Json& pod, const std::string& queue,
                    const std::optional<WorkloadPriority>& priority) {
  const std::string name = job["metadata"].value("name", "");
  const std::string uid = job["metadata"].value("uid", "");
  Json labels = child_labels(name);
  labels[kLabelKueueJobUid] = uid;
  Json template_meta = {{"labels", pod["metadata"].value("labels", Json::object())}};
  Json ws = {{"queueName", queue},
             {"podSets", Json::array({{{"name", kWorkloadPodSet},
                                       {"count", spec.replicas},
                                       {"template", {{"metadata", template_meta}, {"spec", pod["spec"]}}}}})}};
  if (priority) {
    ws["priorityClassRef"] = {{"group", "kueue.x-k8s.io"}, {"kind", "WorkloadPriorityClass"}, {"name", priority->class_name}};
    ws["priority"] = priority->value;
  }
  return {{"apiVersion", "kueue.x-k8s.io/v1beta2"},
          {"kind", "Workload"},
          {"metadata",
           {{"name", workload_name(name, uid)},
            {"namespace", job["metadata"].value("namespace", "")},
            {"labels", labels},
            {"annotations", {{kAnnotationSpecHash, pod_spec_hash(spec)}}},
            {"ownerReferences", Json::array({owner_reference(job)})}}},
          {"spec", ws}};
}

bool workload_outdated(const Json& workload, const TrainingJobSpec& spec) {
  const Json meta = workload.value("metadata", Json::object());
  const Json annotations = meta.value("annotations", Json::object());
  if (annotations.value(kAnnotationSpecHash, "") != pod_spec_hash(spec)) return true;
  const Json ws = workload.value("spec", Json::object());
  if (!ws.contains("podSets") || ws["podSets"].size() != 1) return true;
  return ws["podSets"][0].value("count", -1) != spec.replicas;
}

std::optional<Json> pods_ready_patch(const Json& workload, bool ready, const std::string& now) {
  const Json* c = find_condition(workload, "PodsReady");
  if (ready) {
    if (c && c->value("status", "") == "True") return std::nullopt;
    return status_patch(workload, {{"conditions", with_conditions(workload, {{"PodsReady", "True", "PodsReady",
                                                                               "All pods reached readiness and the workload is running"}},
                                                                  now)}});
  }
  // Only a gang that was ready waits for recovery; before that, no
  // condition is Kueue's "waiting for start" (its timeout runs from the
  // admission).
  if (!c || c->value("status", "") != "True") return std::nullopt;
  return status_patch(workload, {{"conditions", with_conditions(workload, {{"PodsReady", "False", "WaitForRecovery",
                                                                             "At least one pod has failed, waiting for recovery"}},
                                                                now)}});
}

Json requeue_patch(const Json& workload, const std::string& now) {
  const Json* ev = find_condition(workload, "Evicted");
  const std::string reason = ev ? ev->value("reason", "Evicted") : "Evicted";
  const std::string message = ev ? ev->value("message", "") : "";
  const bool requeued = reason == "Preempted" || reason == "NodeFailures";
  Json conditions = with_conditions(workload,
                                    {{"Requeued", requeued ? "True" : "False", reason, message},
                                     {"QuotaReserved", "False", "Pending", message},
                                     {"Admitted", "False", "NoReservation", "The workload has no reservation"}},
                                    now);
  return status_patch(workload, {{"conditions", conditions}, {"admission", nullptr}});
}

Json finished_patch(const Json& workload, bool succeeded, const std::string& message, const std::string& now) {
  return status_patch(workload, {{"conditions", with_conditions(workload,
                                                                {{"Finished", "True", succeeded ? "Succeeded" : "Failed",
                                                                  message.empty() ? "TrainingJob finished" : message}},
                                                                now)}});
}

bool add_flavor(FlavorPlacement& placement, const Json& flavor, std::string* conflict) {
  const Json spec = flavor.value("spec", Json::object());
  if (spec.contains("nodeLabels") && spec["nodeLabels"].is_object())
    for (auto it = spec["nodeLabels"].begin(); it != spec["nodeLabels"].end(); ++it) {
      if (placement.node_selector.contains(it.key()) && placement.node_selector[it.key()] != it.value()) {
        if (conflict)
          *conflict = "ResourceFlavor " + flavor["metadata"].value("name", "") + " asks for node label " + it.key() +
                      "=" + it.value().dump() + ", another assigned flavor for " +
                      placement.node_selector[it.key()].dump();
        return false;
      }
      placement.node_selector[it.key()] = it.value();
    }
  if (spec.contains("tolerations") && spec["tolerations"].is_array())
    for (const auto& t : spec["tolerations"])
      if (std::find(placement.tolerations.begin(), placement.tolerations.end(), t) == placement.tolerations.end())
        placement.tolerations.push_back(t);
  return true;
}

}  // namespace weft::tj
