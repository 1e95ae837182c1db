#include "trainingjob/builders.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>

#include "kube/quantity.h"
#include "launch_env.h"
#include "trainingjob/constants.h"
#include "trainingjob/worker_config.h"
#include "weft_contract.h"

namespace weft::tj {
namespace {

std::string ns_of(const Json& job) { return job["metadata"].value("namespace", "default"); }
std::string name_of(const Json& job) { return job["metadata"].value("name", ""); }
std::string uid_of(const Json& job) { return job["metadata"].value("uid", ""); }

Json child_meta(const Json& job, const std::string& name) {
  return {{"name", name},
          {"namespace", ns_of(job)},
          {"labels", child_labels(name_of(job))},
          {"ownerReferences", Json::array({owner_reference(job)})}};
}

}  // namespace

std::string service_name(const std::string& job) { return job; }
std::string configmap_name(const std::string& job) { return job + "-config"; }
std::string secret_name(const std::string& job, const std::string& uid) { return job + "-rdzv-" + uid; }
std::string network_policy_name(const std::string& job) { return job; }
std::string podgroup_name(const std::string& job) { return job; }
std::string pod_name(const std::string& job, int index) { return job + "-" + std::to_string(index); }
std::string master_addr(const std::string& job, const std::string& ns) {
  return pod_name(job, 0) + "." + service_name(job) + "." + ns + ".svc";
}

Json owner_reference(const Json& job) {
  return {{"apiVersion", "weft.dev/v1alpha1"}, {"kind", "TrainingJob"},   {"name", name_of(job)},
          {"uid", job["metadata"].value("uid", "")}, {"controller", true}, {"blockOwnerDeletion", true}};
}

Json child_labels(const std::string& job) { return {{kLabelJob, job}, {kLabelManagedBy, kManagedBy}}; }

Json build_service(const Json& job, const TrainingJobSpec& spec) {
  Json ports = {{{"name", "rendezvous"}, {"port", spec.master_port}, {"targetPort", spec.master_port}}};
  if (spec.metrics_port() > 0)
    ports.push_back({{"name", "metrics"}, {"port", spec.metrics_port()}, {"targetPort", spec.metrics_port()}});
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", child_meta(job, service_name(name_of(job)))},
          {"spec",
           {{"clusterIP", "None"},
            // Ranks must resolve each other before they are Ready: readiness
            // comes after rendezvous, which needs the names.
            {"publishNotReadyAddresses", true},
            {"selector", {{kLabelJob, name_of(job)}}},
            {"ports", ports}}}};
}

Json build_configmap(const Json& job, const TrainingJobSpec& spec) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", child_meta(job, configmap_name(name_of(job)))},
          {"data",
           {{contract::kConfigKey, worker_config_yaml(spec.worker)},
            // One channel for each value: the spec's cap (or auto) reaches
            // the workers in config.yaml; this key carries only what the
            // tuner writes later. Empty: no size asked for, the workers keep
            // their own.
            {contract::kBucketCapKey, ""}}}};
}

Json build_secret(const Json& job, const std::string& token) {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", child_meta(job, secret_name(name_of(job), uid_of(job)))},
          {"type", "Opaque"},
          {"stringData", {{kSecretTokenKey, token}}}};
}

Json build_network_policy(const Json& job, const TrainingJobSpec& spec, const Json& metrics_from) {
  const Json same_job = {{"matchLabels", child_labels(name_of(job))}};
  Json ingress = Json::array({{{"from", Json::array({{{"podSelector", same_job}}})}}});
  if (spec.metrics_port() > 0) {
    Json metrics = {{"ports", Json::array({{{"protocol", "TCP"}, {"port", spec.metrics_port()}}})}};
    if (metrics_from.is_array() && !metrics_from.empty()) metrics["from"] = metrics_from;
    ingress.push_back(metrics);
  }
  return {{"apiVersion", "networking.k8s.io/v1"},
          {"kind", "NetworkPolicy"},
          {"metadata", child_meta(job, network_policy_name(name_of(job)))},
          {"spec", {{"podSelector", same_job}, {"policyTypes", Json::array({"Ingress"})}, {"ingress", ingress}}}};
}

std::string pod_spec_hash(const TrainingJobSpec& spec) {
  // nlohmann::json objects are key-sorted, so the dump is canonical.
  Json shape = {{"replicas", spec.replicas},     {"image", spec.image},
                {"pullPolicy", spec.image_pull_policy}, {"masterPort", spec.master_port},
                {"resources", spec.resources},   {"template", spec.pod_template},
                {"worker", spec.worker}};
  // Added fields enter the hash only when they differ from their defaults,
  // so pods an older operator created keep their hash (no restart on upgrade).
  if (spec.procs_per_pod_auto || spec.procs_per_pod != 1)
    shape["procsPerPod"] = spec.procs_per_pod_auto ? Json("auto") : Json(spec.procs_per_pod);
  if (spec.shm_size != TrainingJobSpec{}.shm_size) shape["shmSize"] = spec.shm_size;
  // Gang scheduling changes where and how the pods are placed.
  if (const SchedulingSpec& g = spec.scheduling; g.enabled())
    shape["scheduling"] = {{"provider", g.provider}, {"scheduler", g.scheduler()},
                           {"timeout", g.schedule_timeout_seconds.value_or(0)}, {"queue", g.queue}};
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : shape.dump()) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string random_token() {
  std::random_device rd;
  std::string out;
  char buf[3];
  for (int i = 0; i < 32; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned>(rd() & 0xff));
    out += buf;
  }
  return out;
}

bool is_contract_env(const std::string& name) {
  for (const char* n : contract::kOperatorEnv)
    if (name == n) return true;
  return false;
}

const kube::Resource& podgroup_resource(const TrainingJobSpec& spec) {
  return spec.scheduling.volcano() ? kube::kVolcanoPodGroups : kube::kPodGroups;
}

namespace {

// `amount` times `n`, as a quantity: whole units, or millis for a fraction
// (CPU); nullopt when `amount` is not a quantity (validate() refuses those).
std::optional<Json> times(const Json& amount, int n) {
  const kube::Quantity q = kube::parse_quantity(amount);
  if (!q.ok) return std::nullopt;
  const long double total = q.value * n;
  if (total >= 1e15L) return Json(std::to_string(static_cast<long long>(std::min(total, 9e18L))));
  // Millis, rounded: "500m" is read as 0.5 give or take the last bit.
  const long long millis = std::llround(total * 1000);
  if (millis % 1000 == 0) return Json(std::to_string(millis / 1000));
  return Json(std::to_string(millis) + "m");
}

}  // namespace

Json build_podgroup(const Json& job, const TrainingJobSpec& spec) {
  const SchedulingSpec& g = spec.scheduling;
  const kube::Resource& res = podgroup_resource(spec);
  Json pg_spec = {{"minMember", spec.replicas}};
  // Per pod: requests, and limits for what has no request.
  Json per_pod = Json::object();
  for (const char* list : {"limits", "requests"})
    if (auto l = spec.resources.find(list); l != spec.resources.end() && l->is_object())
      for (auto it = l->begin(); it != l->end(); ++it) per_pod[it.key()] = it.value();
  Json min_resources = Json::object();
  for (auto it = per_pod.begin(); it != per_pod.end(); ++it)
    if (auto total = times(it.value(), spec.replicas)) min_resources[it.key()] = *total;
  if (!min_resources.empty()) pg_spec["minResources"] = min_resources;
  if (g.schedule_timeout_seconds) pg_spec["scheduleTimeoutSeconds"] = *g.schedule_timeout_seconds;
  if (!g.queue.empty()) pg_spec["queue"] = g.queue;
  if (g.volcano()) {
    // A PodGroup's priority is the pods' (Volcano orders gangs by it).
    if (auto p = spec.pod_template.find("priorityClassName"); p != spec.pod_template.end() && p->is_string())
      pg_spec["priorityClassName"] = *p;
  }
  return {{"apiVersion", res.api_version()},
          {"kind", res.kind},
          {"metadata", child_meta(job, podgroup_name(name_of(job)))},
          {"spec", pg_spec}};
}

namespace {

// The pod's labels and annotations: the template's, then the operator's own,
// which the template cannot override.
Json pod_metadata(const Json& job, const TrainingJobSpec& spec, int index, int attempt) {
  const std::string job_name = name_of(job);
  const Json& tpl = spec.pod_template;
  Json meta = child_meta(job, pod_name(job_name, index));
  if (tpl.contains("labels"))
    for (auto it = tpl["labels"].begin(); it != tpl["labels"].end(); ++it) meta["labels"][it.key()] = it.value();
  // The job's queue on every pod (schedulers that read it from pods see it),
  // unless the operator queues the job through a Workload (--kueue): Kueue's
  // pod integration would otherwise count the pods a second time.
  if (const Json& jl = job["metadata"].value("labels", Json::object());
      jl.contains(kLabelKueueQueue) && !spec.queued_by_workload)
    meta["labels"][kLabelKueueQueue] = jl[kLabelKueueQueue];
  meta["labels"][kLabelJob] = job_name;  // the user cannot override the operator's own labels
  meta["labels"][kLabelManagedBy] = kManagedBy;
  meta["labels"][kLabelRank] = std::to_string(index);
  meta["labels"][kLabelAttempt] = std::to_string(attempt);
  if (tpl.contains("annotations")) meta["annotations"] = tpl["annotations"];
  meta["annotations"][kAnnotationSpecHash] = pod_spec_hash(spec);
  return meta;
}

// The launch environment (contract/launch_env.h), the rendezvous token, the
// tuning and termination paths, then the template's own variables.
Json pod_env(const Json& job, const TrainingJobSpec& spec, int index, int attempt) {
  using namespace contract;  // env names and mounted files
  const std::string job_name = name_of(job);
  // Pod `index` runs ranks index·P .. index·P+P-1 of pods·P. One rank is the
  // container's process itself; several are started by weft-run, which sets
  // RANK and LOCAL_RANK for each (torchrun's role in a PyTorchJob pod).
  const int procs = spec.ranks_per_pod();
  contract::LaunchEnv launch;
  launch.world = spec.world_size();
  launch.local_world = procs;
  launch.node_rank = index;
  launch.rank = index;  // with one rank a pod; else weft-run sets each rank's
  launch.master_addr = master_addr(job_name, ns_of(job));
  launch.master_port = static_cast<uint16_t>(spec.master_port);
  launch.attempt = attempt;
  launch.job_uid = uid_of(job);
  // An elastic gang smaller than planned: its ranks accumulate so that every
  // step trains on the planned batch.
  if (spec.planned() > spec.replicas) launch.planned_world = spec.planned() * procs;
  Json env = Json::array();
  for (const auto& [name, value] : contract::launch_env_vars(launch, procs == 1))
    env.push_back({{"name", name}, {"value", value}});
  for (Json e : Json::array({
      {{"name", kEnvRdzvToken},
       {"valueFrom", {{"secretKeyRef", {{"name", secret_name(job_name, uid_of(job))}, {"key", kSecretTokenKey}}}}}},
      // The tuning path: rank 0 polls this ConfigMap key and the ranks switch
      // to a new cap at an agreed step. Overrides parallel.bucket_cap_file.
      {{"name", kEnvBucketCapFile}, {"value", kBucketCapPath}},
      // Rank 0's final progress, read back from its termination message.
      {{"name", kEnvTerminationLog}, {"value", kTerminationLogPath}},
  }))
    env.push_back(std::move(e));
  if (spec.pod_template.contains("env"))
    for (const auto& e : spec.pod_template["env"])
      if (!is_contract_env(e.value("name", ""))) env.push_back(e);
  return env;
}

// The worker's container: one rank runs weft-worker itself, several run
// under weft-run; locked down, the config mounted, the metrics ports named.
Json worker_container(const TrainingJobSpec& spec, Json env) {
  using namespace contract;
  const int procs = spec.ranks_per_pod();
  // The ConfigMap is mounted as a directory, never through subPath: only a
  // directory mount sees the tuner's later updates of the bucket cap key.
  Json mounts = Json::array({{{"name", kConfigVolume}, {"mountPath", kConfigMountDir}, {"readOnly", true}},
                             {{"name", kScratchVolume}, {"mountPath", "/tmp"}},
                             {{"name", kShmVolume}, {"mountPath", "/dev/shm"}}});
  if (spec.pod_template.contains("volumeMounts"))
    for (const auto& m : spec.pod_template["volumeMounts"]) mounts.push_back(m);
  Json ports = {{{"name", "rendezvous"}, {"containerPort", spec.master_port}}};
  // Local rank L serves metrics on the base port + L (contract::metrics_port).
  if (spec.metrics_port() > 0)
    for (int l = 0; l < procs && spec.metrics_port() + l <= 65535; ++l)
      ports.push_back({{"name", l == 0 ? std::string("metrics") : "metrics-" + std::to_string(l)},
                       {"containerPort", contract::metrics_port(l, spec.metrics_port())}});
  Json command = {kWorkerBinary}, args = {kConfigPath};
  if (procs > 1) {
    command = {kLauncherBinary};
    // The gang's shape is in the pod's launch environment; weft-run reads it
    // there, so the pod states it once.
    args = {"--from-env", "--", kConfigPath};
  }
  Json container = {
      {"name", kContainerName},
      {"image", spec.image},
      {"imagePullPolicy", spec.image_pull_policy},
      {"command", command},
      {"args", args},
      {"env", std::move(env)},
      {"ports", ports},
      {"volumeMounts", mounts},
      // The worker prints why it failed (bad config, checkpoint I/O) and
      // writes no termination-log file: the log tail becomes the container's
      // termination message, which `kubectl describe` and the operator see.
      {"terminationMessagePolicy", "FallbackToLogsOnError"},
      {"terminationMessagePath", kTerminationLogPath},
      {"securityContext",
       {{"runAsNonRoot", true},
        {"allowPrivilegeEscalation", false},
        {"privileged", false},
        {"readOnlyRootFilesystem", true},
        {"capabilities", {{"drop", {"ALL"}}}}}},
  };
  if (spec.resources.is_object() && !spec.resources.empty()) container["resources"] = spec.resources;
  // Ready means training: the worker's /ready answers 200 once its rank
  // (local rank 0 of a pod of several) has finished a step, and a step needs
  // every rank of the job. Readiness only: a slow first step restarts nothing.
  if (spec.metrics_port() > 0)
    container["readinessProbe"] = {{"httpGet", {{"path", "/ready"}, {"port", "metrics"}}},
                                   {"periodSeconds", 5},
                                   {"timeoutSeconds", 2},
                                   {"failureThreshold", 1}};
  return container;
}

Json pod_volumes(const Json& job, const TrainingJobSpec& spec) {
  using namespace contract;
  Json volumes = Json::array({{{"name", kConfigVolume}, {"configMap", {{"name", configmap_name(name_of(job))}}}},
                              // The root filesystem is read-only; /tmp is the worker's scratch space.
                              {{"name", kScratchVolume}, {"emptyDir", Json::object()}},
                              // A container runtime's /dev/shm is 64 MiB; NCCL's shared-memory
                              // transport between the ranks of a pod needs more. Memory-backed,
                              // so it counts against the pod's memory limit.
                              {{"name", kShmVolume}, {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", spec.shm_size}}}}});
  if (spec.pod_template.contains("volumes"))
    for (const auto& v : spec.pod_template["volumes"]) volumes.push_back(v);
  return volumes;
}

// Where the pod may run: the template's scheduling fields, nodes of replaced
// stragglers avoided, Kueue's flavors, and the gang scheduler's PodGroup named.
void place_pod(const Json& job, const TrainingJobSpec& spec, Json& meta, Json& pod_spec) {
  const Json& tpl = spec.pod_template;
  // The scheduling and runtime settings GPU clusters rely on reach the pod
  // unchanged (hostNetwork only when the operator allows it: pod_powers.h).
  for (const char* k : kTemplatePodFields)
    if (tpl.contains(k)) pod_spec[k] = tpl[k];
  // Nodes of replaced stragglers (spec.stragglers.action replace): every
  // required term (they are ORed) also excludes them, so a template's own
  // affinity keeps holding.
  if (!spec.avoid_nodes.empty()) {
    Json& required = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    if (!required.contains("nodeSelectorTerms") || !required["nodeSelectorTerms"].is_array() ||
        required["nodeSelectorTerms"].empty())
      required["nodeSelectorTerms"] = Json::array({Json::object()});
    for (Json& term : required["nodeSelectorTerms"])
      term["matchFields"].push_back({{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", spec.avoid_nodes}});
  }
  // Kueue's admission: the assigned flavors' node labels win over the
  // template's, their tolerations add to its.
  for (auto it = spec.queue_node_selector.begin(); it != spec.queue_node_selector.end(); ++it)
    pod_spec["nodeSelector"][it.key()] = it.value();
  for (const auto& t : spec.queue_tolerations) pod_spec["tolerations"].push_back(t);
  // Gang scheduling: the pod names its PodGroup the way its scheduler reads
  // it, and goes to that scheduler (validate() refuses a template's own).
  if (const SchedulingSpec& g = spec.scheduling; g.enabled()) {
    pod_spec["schedulerName"] = g.scheduler();
    if (g.volcano())
      meta["annotations"][kAnnotationVolcanoGroup] = podgroup_name(name_of(job));
    else
      meta["labels"][kLabelPodGroup] = podgroup_name(name_of(job));
  }
}

}  // namespace

Json build_pod(const Json& job, const TrainingJobSpec& spec, int index, int attempt) {
  const std::string job_name = name_of(job);
  Json meta = pod_metadata(job, spec, index, attempt);
  Json pod_spec = {
      {"hostname", pod_name(job_name, index)},
      {"subdomain", service_name(job_name)},
      // The operator restarts the whole gang; the kubelet must not restart one rank.
      {"restartPolicy", "Never"},
      {"automountServiceAccountToken", false},
      {"enableServiceLinks", false},
      {"securityContext",
       {{"runAsNonRoot", true}, {"runAsUser", 65532}, {"runAsGroup", 65532}, {"fsGroup", 65532},
        {"seccompProfile", {{"type", "RuntimeDefault"}}}}},
      {"containers", Json::array({worker_container(spec, pod_env(job, spec, index, attempt))})},
      {"volumes", pod_volumes(job, spec)},
  };
  place_pod(job, spec, meta, pod_spec);
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", pod_spec}};
}

}  // namespace weft::tj
