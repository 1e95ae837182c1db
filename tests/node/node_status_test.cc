// Pod phase and status as a kubelet reports them; the Node and its Lease.
#include <gtest/gtest.h>

#include "node/pod_status.h"

namespace weft::node {
namespace {

ContainerState terminated(int code) {
  ContainerState s;
  s.kind = ContainerState::Kind::Terminated;
  s.exit_code = code;
  s.started_at = "2026-01-01T00:00:00Z";
  s.finished_at = "2026-01-01T00:00:09Z";
  return s;
}

TEST(PodStatus, PhaseFollowsRestartPolicy) {
  PodView v;
  EXPECT_EQ(pod_phase(v, "Never"), "Pending");
  v.state.kind = ContainerState::Kind::Running;
  EXPECT_EQ(pod_phase(v, "Never"), "Running");
  v.state = terminated(0);
  EXPECT_EQ(pod_phase(v, "Never"), "Succeeded");
  EXPECT_EQ(pod_phase(v, "OnFailure"), "Succeeded");
  EXPECT_EQ(pod_phase(v, "Always"), "Running");
  v.state = terminated(3);
  EXPECT_EQ(pod_phase(v, "Never"), "Failed");
  EXPECT_EQ(pod_phase(v, "OnFailure"), "Running");
  v.state = ContainerState{};  // waiting for a restart
  v.restart_count = 1;
  EXPECT_EQ(pod_phase(v, "Always"), "Running");
}

TEST(PodStatus, TerminatedContainerCarriesExitCodeAndMessage) {
  Json pod = {{"metadata", {{"name", "p"}}}, {"spec", {{"restartPolicy", "Never"}}}};
  PodView v;
  v.pod_ip = "127.1.0.4";
  v.host_ip = "127.0.0.1";
  v.container = "worker";
  v.state = terminated(137);
  v.state.signal = 9;
  v.state.message = "killed";
  Json st = build_pod_status(pod, v, "2026-01-01T00:00:10Z");
  EXPECT_EQ(st["phase"], "Failed");
  EXPECT_EQ(st["podIP"], "127.1.0.4");
  EXPECT_EQ(st["podIPs"][0]["ip"], "127.1.0.4");
  const Json& t = st["containerStatuses"][0]["state"]["terminated"];
  EXPECT_EQ(t["exitCode"], 137);
  EXPECT_EQ(t["signal"], 9);
  EXPECT_EQ(t["reason"], "Error");
  EXPECT_EQ(t["message"], "killed");
  for (const auto& c : st["conditions"]) {
    if (c["type"] == "Ready") {
      EXPECT_EQ(c["status"], "False");
    }
  }
}

TEST(PodStatus, ConditionsKeepTheirTransitionTime) {
  Json ready = {{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", "2026-01-01T00:00:01Z"}};
  Json pod = {{"metadata", {{"name", "p"}}}, {"spec", {{"restartPolicy", "Never"}}}};
  pod["status"]["conditions"] = Json::array({ready});
  PodView v;
  v.state.kind = ContainerState::Kind::Running;
  v.state.started_at = "2026-01-01T00:00:01Z";
  Json st = build_pod_status(pod, v, "2026-01-01T00:05:00Z");
  for (const auto& c : st["conditions"]) {
    if (c["type"] == "Ready") {
      EXPECT_EQ(c["lastTransitionTime"], "2026-01-01T00:00:01Z");
    }
    if (c["type"] == "Initialized") {
      EXPECT_EQ(c["lastTransitionTime"], "2026-01-01T00:05:00Z");
    }
  }
  EXPECT_EQ(st["containerStatuses"][0]["ready"], true);
  EXPECT_EQ(st["containerStatuses"][0]["state"]["running"]["startedAt"], "2026-01-01T00:00:01Z");
}

// A running container with a readiness probe is Ready only once the probe
// has passed; without a probe, running is ready.
TEST(PodStatus, ReadyFollowsTheReadinessProbe) {
  Json pod = {{"metadata", {{"name", "p"}}}, {"spec", {{"restartPolicy", "Never"}}}};
  PodView v;
  v.state.kind = ContainerState::Kind::Running;
  auto ready_of = [&](const Json& st) {
    for (const auto& c : st["conditions"])
      if (c["type"] == "Ready") return c["status"].get<std::string>();
    return std::string();
  };
  EXPECT_EQ(ready_of(build_pod_status(pod, v, "2026-01-01T00:00:00Z")), "True");
  v.probe_ready = false;
  Json st = build_pod_status(pod, v, "2026-01-01T00:00:00Z");
  EXPECT_EQ(ready_of(st), "False");
  EXPECT_EQ(st["phase"], "Running");
  EXPECT_EQ(st["containerStatuses"][0]["ready"], false);
  v.probe_ready = true;
  EXPECT_EQ(ready_of(build_pod_status(pod, v, "2026-01-01T00:00:00Z")), "True");
}

TEST(PodStatus, ReadinessProbeResolvesANamedPort) {
  Json c = {{"name", "worker"},
            {"ports", {{{"name", "rendezvous"}, {"containerPort", 29500}}, {{"name", "metrics"}, {"containerPort", 9400}}}},
            {"readinessProbe", {{"httpGet", {{"path", "/ready"}, {"port", "metrics"}}}, {"periodSeconds", 5}}}};
  auto p = readiness_probe(c);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->port, 9400);
  EXPECT_EQ(p->path, "/ready");
  EXPECT_EQ(p->period_s, 5);
  EXPECT_EQ(p->timeout_s, 1);
  c["readinessProbe"]["httpGet"]["port"] = 8080;
  EXPECT_EQ(readiness_probe(c)->port, 8080);
  c["readinessProbe"]["httpGet"]["port"] = "nope";  // no such port: not a probe weft-node can run
  EXPECT_FALSE(readiness_probe(c));
  c.erase("readinessProbe");
  EXPECT_FALSE(readiness_probe(c));
  c["readinessProbe"] = {{"exec", {{"command", {"true"}}}}};
  EXPECT_FALSE(readiness_probe(c));
}

TEST(NodeStatus, NodeIsReadyWithCapacityAndLeaseIsOwnedByIt) {
  NodeCapacity cap;
  cap.cpu = "8";
  Json n = build_node("weft-node-0", "127.0.0.1", cap, "2026-01-01T00:00:00Z");
  EXPECT_EQ(n["status"]["capacity"]["cpu"], "8");
  EXPECT_EQ(n["status"]["allocatable"]["pods"], "110");
  bool ready = false;
  for (const auto& c : n["status"]["conditions"]) ready |= c["type"] == "Ready" && c["status"] == "True";
  EXPECT_TRUE(ready);
  EXPECT_EQ(n["metadata"]["labels"]["kubernetes.io/hostname"], "weft-node-0");
  Json l = build_node_lease("weft-node-0", "uid-1", 40, "2026-01-01T00:00:00.000000Z");
  EXPECT_EQ(l["metadata"]["namespace"], "kube-node-lease");
  EXPECT_EQ(l["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  EXPECT_EQ(l["spec"]["leaseDurationSeconds"], 40);
}

TEST(NodeStatus, ExitCodeOfSignalledProcess) {
  EXPECT_EQ(exit_code_of(9), 137);        // WTERMSIG 9
  EXPECT_EQ(exit_code_of(3 << 8), 3);     // exited 3
}

}  // namespace
}  // namespace weft::node
