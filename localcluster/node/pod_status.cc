#include "node/pod_status.h"

#include <sys/wait.h>

#include <algorithm>

namespace weft::node {
namespace {

Json state_json(const ContainerState& s) {
  switch (s.kind) {
    case ContainerState::Kind::Waiting: {
      Json w = {{"reason", s.reason.empty() ? "ContainerCreating" : s.reason}};
      if (!s.message.empty()) w["message"] = s.message;
      return {{"waiting", w}};
    }
    case ContainerState::Kind::Running:
      return {{"running", {{"startedAt", s.started_at}}}};
    case ContainerState::Kind::Terminated: {
      Json t = {{"exitCode", s.exit_code},
                {"reason", s.reason.empty() ? (s.exit_code == 0 ? "Completed" : "Error") : s.reason},
                {"startedAt", s.started_at.empty() ? Json(nullptr) : Json(s.started_at)},
                {"finishedAt", s.finished_at}};
      if (s.signal) t["signal"] = s.signal;
      if (!s.message.empty()) t["message"] = s.message;
      if (!s.container_id.empty()) t["containerID"] = s.container_id;
      return {{"terminated", t}};
    }
  }
  return Json::object();
}

std::string old_transition(const Json& pod, const std::string& type, const std::string& status) {
  if (!pod.contains("status") || !pod["status"].contains("conditions")) return "";
  for (const auto& c : pod["status"]["conditions"])
    if (c.value("type", "") == type && c.value("status", "") == status) return c.value("lastTransitionTime", "");
  return "";
}

}  // namespace

std::string pod_phase(const PodView& v, const std::string& restart_policy) {
  using K = ContainerState::Kind;
  if (v.state.kind == K::Running) return "Running";
  if (v.state.kind == K::Waiting) return v.restart_count > 0 || v.last_state ? "Running" : "Pending";
  const bool ok = v.state.exit_code == 0;
  if (restart_policy == "Never") return ok ? "Succeeded" : "Failed";
  if (restart_policy == "OnFailure" && ok) return "Succeeded";
  return "Running";  // about to be restarted
}

Json build_pod_status(const Json& pod, const PodView& v, const std::string& now) {
  using K = ContainerState::Kind;
  const std::string policy = pod["spec"].value("restartPolicy", "Always");
  const std::string phase = pod_phase(v, policy);
  const bool started = v.state.kind != K::Waiting || v.restart_count > 0;
  const bool running = v.state.kind == K::Running;
  const bool ready = running && v.probe_ready.value_or(true);
  auto cond = [&](const std::string& type, bool ok, const std::string& reason = "") {
    const std::string status = ok ? "True" : "False";
    std::string t = old_transition(pod, type, status);
    Json c = {{"type", type}, {"status", status}, {"lastProbeTime", nullptr},
              {"lastTransitionTime", t.empty() ? now : t}};
    if (!reason.empty()) c["reason"] = reason;
    return c;
  };
  const std::string not_ready_reason =
      phase == "Succeeded" || phase == "Failed" ? "PodCompleted" : "ContainersNotReady";
  Json conditions = Json::array({cond("Initialized", true), cond("Ready", ready, ready ? "" : not_ready_reason),
                                 cond("ContainersReady", ready, ready ? "" : not_ready_reason),
                                 cond("PodScheduled", true)});
  Json cs = {{"name", v.container},
             {"image", v.image},
             {"imageID", ""},
             {"ready", ready},
             {"started", running},
             {"restartCount", v.restart_count},
             {"state", state_json(v.state)},
             {"lastState", v.last_state ? state_json(*v.last_state) : Json::object()}};
  if (!v.state.container_id.empty()) cs["containerID"] = v.state.container_id;
  Json st = {{"phase", phase},
             {"conditions", conditions},
             {"hostIP", v.host_ip},
             {"startTime", v.start_time},
             {"containerStatuses", Json::array({cs})}};
  if (started || !v.pod_ip.empty()) {
    st["podIP"] = v.pod_ip;
    st["podIPs"] = Json::array({{{"ip", v.pod_ip}}});
  }
  return st;
}

std::optional<ReadinessProbe> readiness_probe(const Json& container) {
  auto p = container.find("readinessProbe");
  if (p == container.end() || !p->is_object()) return std::nullopt;
  auto get = p->find("httpGet");
  if (get == p->end() || !get->is_object()) return std::nullopt;
  ReadinessProbe r;
  r.path = get->value("path", std::string("/"));
  r.period_s = std::max(1, p->value("periodSeconds", 10));
  r.timeout_s = std::max(1, p->value("timeoutSeconds", 1));
  const Json port = get->value("port", Json());
  if (port.is_number_integer()) {
    r.port = port.get<int>();
  } else if (port.is_string()) {
    if (auto ports = container.find("ports"); ports != container.end() && ports->is_array())
      for (const auto& cp : *ports)
        if (cp.value("name", "") == port.get<std::string>()) r.port = cp.value("containerPort", 0);
  }
  if (r.port <= 0 || r.port > 65535) return std::nullopt;
  return r;
}

int exit_code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 255;
}

Json node_status_patch(const std::string& name, const std::string& internal_ip, const NodeCapacity& cap,
                       const std::string& now, const std::string& ready_since) {
  const Json resources = {{"cpu", cap.cpu}, {"memory", cap.memory}, {"pods", cap.pods},
                          {"ephemeral-storage", cap.ephemeral_storage}};
  auto cond = [&](const std::string& type, bool ok, const std::string& reason, const std::string& msg) {
    return Json{{"type", type},
                {"status", ok ? "True" : "False"},
                {"reason", reason},
                {"message", msg},
                {"lastHeartbeatTime", now},
                {"lastTransitionTime", ready_since}};
  };
  return {{"capacity", resources},
          {"allocatable", resources},
          {"conditions",
           Json::array({cond("MemoryPressure", false, "KubeletHasSufficientMemory", "weft-node does not limit memory"),
                        cond("DiskPressure", false, "KubeletHasNoDiskPressure", "weft-node does not limit disk"),
                        cond("PIDPressure", false, "KubeletHasSufficientPID", "weft-node does not limit PIDs"),
                        cond("Ready", true, "KubeletReady", "weft-node is posting ready status")})},
          {"addresses", Json::array({{{"type", "InternalIP"}, {"address", internal_ip}},
                                    {{"type", "Hostname"}, {"address", name}}})},
          {"nodeInfo",
           {{"kubeletVersion", cap.kubelet_version},
            {"kubeProxyVersion", ""},
            {"containerRuntimeVersion", "weft-node://0.1"},
            {"operatingSystem", "linux"},
            {"architecture", "amd64"},
            {"osImage", "local processes"},
            {"kernelVersion", ""},
            {"machineID", ""},
            {"systemUUID", ""},
            {"bootID", ""}}}};
}

Json build_node(const std::string& name, const std::string& internal_ip, const NodeCapacity& cap,
                const std::string& now) {
  Json status = node_status_patch(name, internal_ip, cap, now, now);
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name},
            {"labels",
             {{"kubernetes.io/hostname", name},
              {"kubernetes.io/os", "linux"},
              {"kubernetes.io/arch", "amd64"},
              {"weft.dev/node-agent", "weft-node"}}}}},
          {"spec", Json::object()},
          {"status", status}};
}

Json build_node_lease(const std::string& node, const std::string& node_uid, int duration_seconds,
                      const std::string& now_micro) {
  Json meta = {{"name", node}, {"namespace", "kube-node-lease"}};
  if (!node_uid.empty())
    meta["ownerReferences"] = Json::array({{{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}, {"uid", node_uid}}});
  return {{"apiVersion", "coordination.k8s.io/v1"},
          {"kind", "Lease"},
          {"metadata", meta},
          {"spec", {{"holderIdentity", node}, {"leaseDurationSeconds", duration_seconds}, {"renewTime", now_micro}}}};
}

}  // namespace weft::node
