// weft-node against the real control plane of the `kube` fixture. Each test
// runs its own agent process (own state dir, own Node names, tainted so the
// shared fixture's scheduler never places other tests' pods on it) and binds
// its pods with spec.nodeName. Containers are /bin/sh scripts, so these tests
// need no worker build. They assert the world: objects, files, processes.
//
// Waits: a test starts its pods' clocks only once its agent says it serves
// (its Node registered, its caches synced), a wait bounded by that event; a
// wait for the world to change is a poll of the API server whose limit is
// scaled to how busy the host is (host_scale). A wait that runs out says
// what the agent was doing: its process state and the tail of its log, and
// the pod's status or why it could not be read.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "kube/clock.h"
#include "kube/kube_api.h"
#include "kube/kube_config.h"
#include "node/pod_process.h"
#include "node/volumes.h"
#include "support/host_speed.h"

namespace weft::node {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using weft::testing::host_scale;
using weft::testing::scaled;

std::string env_dir() { return WEFT_KUBE_ENV_DIR; }

kube::KubeApi& api() {
  static kube::KubeApi a(kube::load_kubeconfig(env_dir() + "/kubeconfig"), kube::ApiOptions{200, 400});
  return a;
}

// Polls pred until it holds or `timeout` (scaled to the host) has passed.
bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 30s) {
  const auto until = std::chrono::steady_clock::now() + scaled(timeout);
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return pred();
}

// Names no other test process of this run has used: a pid alone repeats
// within a CI run (pid_max is often 32768), and a Namespace of an earlier
// test with the same name may still be terminating.
std::string unique(const std::string& prefix) {
  static std::mt19937 rng(std::random_device{}());
  static int n = 0;
  char buf[8];
  std::snprintf(buf, sizeof buf, "%05x", static_cast<unsigned>(rng() & 0xfffff));
  return prefix + "-" + buf + "-" + std::to_string(++n);
}

std::string last_lines(const std::string& path, size_t n) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > n) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += "  " + l + "\n";
  return out;
}

// A weft-node process serving one Node named `node`.
class Agent {
 public:
  explicit Agent(std::string node) : node_(std::move(node)), octet_(random_octet()) {
    state_ = fs::path(env_dir()) / ("node-it-" + node_);
    fs::remove_all(state_);
    fs::create_directories(state_);
    start();
  }
  ~Agent() {
    stop(SIGTERM);
    std::string cmd = std::string(WEFT_BIN_DIR) + "/weft-node cleanup --state-dir " + state_.string() + " >/dev/null";
    (void)!std::system(cmd.c_str());
    api().remove(kube::kNodes, "", node_ + "-0");
  }
  // Starts the agent and waits until it says it serves: its Node is
  // registered and its caches are synced, so a pod created now is its to
  // run. Bounded by that event, or by the agent's exit.
  void start() {
    const size_t served_before = count_in_log(kServing);
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string log = log_path();
      FILE* f = std::freopen(log.c_str(), "a", stdout);
      (void)f;
      ::dup2(1, 2);
      const std::string bin = std::string(WEFT_BIN_DIR) + "/weft-node";
      const std::string kc = env_dir() + "/kubeconfig";
      ::execl(bin.c_str(), bin.c_str(), "--kubeconfig", kc.c_str(), "--state-dir", state_.c_str(), "--node-prefix",
              node_.c_str(), "--taint", "weft.dev/node-test=true:NoSchedule", "--pod-ip-octet",
              std::to_string(octet_).c_str(), nullptr);
      ::_exit(127);
    }
    const auto until = std::chrono::steady_clock::now() + scaled(120s);
    while (count_in_log(kServing) == served_before && alive() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(50ms);
    if (count_in_log(kServing) == served_before) ADD_FAILURE() << "weft-node never served:\n" << describe();
  }
  bool alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return true;
    exit_status_ = status;
    pid_ = -1;
    return false;
  }
  // What the agent was doing: whether it runs, and the end of its log.
  std::string describe(size_t lines = 40) {
    std::ostringstream out;
    if (alive())
      out << "weft-node (pid " << pid_ << ") is running";
    else
      out << "weft-node is not running (wait status " << exit_status_ << ")";
    out << "; the last lines of " << log_path() << ":\n" << last_lines(log_path(), lines);
    return out.str();
  }
  void stop(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string node() const { return node_ + "-0"; }
  fs::path state() const { return state_; }
  // Its pods' addresses are 127.<octet>.x.y: one octet per agent, so the
  // agents of tests running side by side never hand out the same address.
  std::string ip_prefix() const { return "127." + std::to_string(octet_) + "."; }

 private:
  static constexpr const char* kServing = "weft-node: serving nodes";
  static int random_octet() {
    static std::mt19937 rng(std::random_device{}());
    return 20 + static_cast<int>(rng() % 230);
  }
  std::string log_path() const { return state_.string() + "/../node-it-" + node_ + ".log"; }
  size_t count_in_log(const std::string& what) const {
    std::ifstream in(log_path());
    size_t n = 0;
    for (std::string line; std::getline(in, line);) n += line.find(what) != std::string::npos;
    return n;
  }

  std::string node_;
  fs::path state_;
  int octet_;
  pid_t pid_ = -1;
  int exit_status_ = 0;
};

class Namespace {
 public:
  Namespace() : name_(unique("node-it")) {
    auto created = api().create(kube::kNamespaces, "",
                                {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name_}}}});
    if (!created) ADD_FAILURE() << "create namespace " << name_ << ": " << created.error().message;
    // Pods are admitted once the namespace's default ServiceAccount exists.
    if (!eventually([&] {
          return api().get(kube::Resource{"", "v1", "serviceaccounts", "ServiceAccount"}, name_, "default").ok();
        }))
      ADD_FAILURE() << "the default ServiceAccount never appeared in " << name_;
  }
  ~Namespace() { api().remove(kube::kNamespaces, "", name_); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

Json sh_pod(const std::string& name, const std::string& node, const std::string& script, Json extra_container = {},
            Json extra_spec = {}) {
  Json c = {{"name", "main"}, {"image", "local"}, {"command", {"/bin/sh", "-c", script}}};
  if (extra_container.is_object()) c.update(extra_container);
  Json spec = {{"nodeName", node}, {"restartPolicy", "Never"}, {"containers", Json::array({c})},
               {"tolerations", Json::array({{{"operator", "Exists"}}})}};
  if (extra_spec.is_object()) spec.update(extra_spec);
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", name}}}, {"spec", spec}};
}

Json get_pod(const std::string& ns, const std::string& name) {
  auto p = api().get(kube::kPods, ns, name);
  return p ? *p : Json();
}

std::string phase(const std::string& ns, const std::string& name) {
  Json p = get_pod(ns, name);
  return p.is_null() || !p.contains("status") ? "" : p["status"].value("phase", "");
}

// A pod as a failure message shows it: its status, or why it is not there.
std::string pod_state(const std::string& ns, const std::string& name) {
  auto p = api().get(kube::kPods, ns, name);
  if (!p) return "pod " + ns + "/" + name + ": " + p.error().message;
  return "pod " + ns + "/" + name + " status: " + (p->contains("status") ? (*p)["status"].dump() : "none");
}

int exit_code(const Json& pod) {
  try {
    return pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"].get<int>();
  } catch (...) {
    return -1;
  }
}

std::string pod_log(const Agent& a, const std::string& ns, const Json& pod) {
  const std::string dir = a.state().string() + "/logs/" + ns + "_" + pod["metadata"].value("name", "") + "_" +
                          pod["metadata"].value("uid", "") + "/main";
  std::string all, s;
  for (int run = 0; read_file(dir + "/" + std::to_string(run) + ".log", &s); ++run) all += s;
  return all;
}

// For a failed wait: each pod's status (or why it cannot be read), then what
// the agent was doing.
std::string what_happened(Agent& a, const std::string& ns, std::initializer_list<std::string> pods) {
  std::string out;
  for (const auto& name : pods) out += pod_state(ns, name) + "\n";
  return out + a.describe();
}

TEST(NodeAgent, RegistersAReadyNodeAndRenewsItsLease) {
  Agent agent(unique("reg"));
  ASSERT_TRUE(eventually([&] { return api().get(kube::kNodes, "", agent.node()).ok(); })) << agent.describe();
  Json node = *api().get(kube::kNodes, "", agent.node());
  EXPECT_EQ(node["status"]["capacity"]["cpu"], "32");
  bool ready = false;
  for (const auto& c : node["status"]["conditions"]) ready |= c["type"] == "Ready" && c["status"] == "True";
  EXPECT_TRUE(ready);
  ASSERT_TRUE(eventually([&] { return api().get(kube::kLeases, "kube-node-lease", agent.node()).ok(); }))
      << agent.describe();
  const std::string first = (*api().get(kube::kLeases, "kube-node-lease", agent.node()))["spec"].value("renewTime", "");
  EXPECT_TRUE(eventually(
      [&] {
        return (*api().get(kube::kLeases, "kube-node-lease", agent.node()))["spec"].value("renewTime", "") != first;
      },
      15s))
      << "lease not renewed\n"
      << agent.describe();
}

// One pod sees its env (literal, secret and field refs), its ConfigMap and
// Secret volumes, its emptyDir, its hostname, and the DNS names of itself and
// of a peer behind a headless Service; ConfigMap updates reach the file.
TEST(NodeAgent, RunsPodsWithEnvVolumesAndClusterNames) {
  Namespace ns;
  Agent agent(unique("run"));
  const std::string n = ns.name();
  api().create(kube::kSecrets, n, {{"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", {{"name", "tok"}}},
                                  {"stringData", {{"token", "s3cr3t"}}}});
  api().create(kube::kConfigMaps, n, {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "cfg"}}},
                                     {"data", {{"bucket_cap_mb", "4"}}}});
  api().create(kube::kServices, n,
               {{"apiVersion", "v1"}, {"kind", "Service"}, {"metadata", {{"name", "job"}}},
                {"spec", {{"clusterIP", "None"}, {"publishNotReadyAddresses", true}, {"selector", {{"app", "job"}}},
                          {"ports", {{{"port", 29500}}}}}}});
  const std::string hostdir = (agent.state() / "hostpath").string();
  // The peer waits to be deleted; the main pod checks everything and waits
  // for the ConfigMap update, up to 60 s each for the peer's name and the
  // update: on a loaded machine the agent may report Running late, and the
  // test updates the ConfigMap only once it has seen Running.
  Json peer = sh_pod("job-0", agent.node(), "trap 'exit 0' TERM; while true; do sleep 0.1; done", {},
                     {{"hostname", "job-0"}, {"subdomain", "job"}, {"terminationGracePeriodSeconds", 5}});
  peer["metadata"]["labels"] = {{"app", "job"}};
  ASSERT_TRUE(api().create(kube::kPods, n, peer).ok());
  const std::string script =
      "set -e; echo token=$TOKEN pod=$POD ip=$IP bind=$WEFT_BIND_ADDR; hostname; "
      "test \"$(cat /etc/weft/bucket_cap_mb)\" = 4; test \"$(cat /etc/tok/token)\" = s3cr3t; "
      "touch /tmp/scratch; echo ok > /data/out; "
      "for i in $(seq 1 600); do getent hosts job-0.job." + n + ".svc >/dev/null && break; sleep 0.1; done; "
      "getent hosts job-0.job." + n + ".svc; getent hosts job-0.job." + n + ".svc.cluster.local; "
      "getent hosts job-1.job." + n + ".svc; getent hosts job." + n + ".svc; "
      "for i in $(seq 1 600); do test \"$(cat /etc/weft/bucket_cap_mb)\" = 8 && break; sleep 0.1; done; "
      "test \"$(cat /etc/weft/bucket_cap_mb)\" = 8; echo cap updated";
  Json env = Json::array({{{"name", "TOKEN"}, {"valueFrom", {{"secretKeyRef", {{"name", "tok"}, {"key", "token"}}}}}},
                          {{"name", "POD"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}},
                          {{"name", "IP"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}}});
  Json mounts = Json::array({{{"name", "cfg"}, {"mountPath", "/etc/weft"}},
                             {{"name", "tok"}, {"mountPath", "/etc/tok"}},
                             {{"name", "tmp"}, {"mountPath", "/tmp"}},
                             {{"name", "data"}, {"mountPath", "/data"}}});
  Json volumes = Json::array({{{"name", "cfg"}, {"configMap", {{"name", "cfg"}}}},
                              {{"name", "tok"}, {"secret", {{"secretName", "tok"}}}},
                              {{"name", "tmp"}, {"emptyDir", Json::object()}},
                              {{"name", "data"}, {"hostPath", {{"path", hostdir}, {"type", "DirectoryOrCreate"}}}}});
  Json pod = sh_pod("job-1", agent.node(), script, {{"env", env}, {"volumeMounts", mounts}},
                    {{"hostname", "job-1"}, {"subdomain", "job"}, {"volumes", volumes}});
  pod["metadata"]["labels"] = {{"app", "job"}};
  ASSERT_TRUE(api().create(kube::kPods, n, pod).ok());

  // Running, or already ended: a pod that failed is reported now, with its
  // log, instead of waiting for a state it has left.
  ASSERT_TRUE(eventually([&] {
    const auto p = phase(n, "job-1");
    return p == "Running" || p == "Succeeded" || p == "Failed";
  })) << what_happened(agent, n, {"job-1"});
  Json running = get_pod(n, "job-1");
  ASSERT_EQ(phase(n, "job-1"), "Running") << pod_log(agent, n, running) << pod_state(n, "job-1");
  const std::string ip = running["status"].value("podIP", "");
  EXPECT_EQ(ip.rfind(agent.ip_prefix(), 0), 0u) << ip;
  EXPECT_TRUE(eventually([&] { return phase(n, "job-0") == "Running"; })) << what_happened(agent, n, {"job-0"});
  const std::string peer_ip = get_pod(n, "job-0")["status"].value("podIP", "");
  EXPECT_NE(ip, peer_ip);
  std::this_thread::sleep_for(500ms);
  Json cm = *api().get(kube::kConfigMaps, n, "cfg");
  cm["data"]["bucket_cap_mb"] = "8";
  ASSERT_TRUE(api().update(kube::kConfigMaps, n, cm).ok());

  ASSERT_TRUE(eventually([&] {
    const auto p = phase(n, "job-1");
    return p == "Succeeded" || p == "Failed";
  })) << what_happened(agent, n, {"job-1"});
  Json done = get_pod(n, "job-1");
  const std::string log = pod_log(agent, n, done);
  EXPECT_EQ(phase(n, "job-1"), "Succeeded") << log;
  EXPECT_EQ(exit_code(done), 0);
  EXPECT_NE(log.find("token=s3cr3t pod=job-1 ip=" + ip + " bind=" + ip), std::string::npos) << log;
  EXPECT_NE(log.find("\njob-1\n"), std::string::npos) << "hostname:\n" << log;
  EXPECT_NE(log.find(peer_ip + " "), std::string::npos) << "peer name did not resolve:\n" << log;
  EXPECT_NE(log.find(ip + " "), std::string::npos) << "own name did not resolve:\n" << log;
  EXPECT_NE(log.find("cap updated"), std::string::npos) << log;
  std::string out;
  EXPECT_TRUE(read_file(hostdir + "/out", &out));
  EXPECT_FALSE(fs::exists("/tmp/scratch")) << "emptyDir must hide the host's /tmp";
}

// Deletion: SIGTERM, then SIGKILL after the grace period; the pod object is
// removed by the agent (final delete) and no process is left.
TEST(NodeAgent, DeletionSendsSigtermThenSigkillAfterTheGracePeriod) {
  Namespace ns;
  Agent agent(unique("del"));
  const std::string n = ns.name();
  ASSERT_TRUE(api().create(kube::kPods, n, sh_pod("polite", agent.node(), "trap 'echo got TERM; exit 0' TERM; "
                                                  "while true; do sleep 0.1; done", {},
                                                  {{"terminationGracePeriodSeconds", 30}})).ok());
  ASSERT_TRUE(api().create(kube::kPods, n, sh_pod("stubborn", agent.node(), "trap '' TERM; "
                                                  "while true; do sleep 0.1; done", {},
                                                  {{"terminationGracePeriodSeconds", 2}})).ok());
  ASSERT_TRUE(eventually([&] { return phase(n, "polite") == "Running" && phase(n, "stubborn") == "Running"; }))
      << what_happened(agent, n, {"polite", "stubborn"});
  std::this_thread::sleep_for(300ms);  // the shell has installed its trap
  auto pid_of = [&](const std::string& name) {
    Json p = get_pod(n, name);
    auto rec = read_json(agent.state().string() + "/pods/" + p["metadata"].value("uid", "") + "/runs/0/pid.json");
    return rec ? rec->value("pid", -1) : -1;
  };
  const int polite = pid_of("polite"), stubborn = pid_of("stubborn");
  ASSERT_GT(polite, 0);
  ASSERT_GT(stubborn, 0);
  const auto t0 = std::chrono::steady_clock::now();
  api().remove(kube::kPods, n, "polite");
  api().remove(kube::kPods, n, "stubborn");
  ASSERT_TRUE(eventually([&] { return get_pod(n, "polite").is_null(); }, 10s)) << what_happened(agent, n, {"polite"});
  const double polite_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(eventually([&] { return get_pod(n, "stubborn").is_null(); }, 10s))
      << what_happened(agent, n, {"stubborn"});
  const double stubborn_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(polite_s, 1.5 * host_scale()) << "a pod that exits on SIGTERM goes at once\n" << agent.describe();
  EXPECT_GE(stubborn_s, 1.8) << "SIGKILL before the grace period";
  EXPECT_LT(stubborn_s, 2 + 2 * host_scale()) << agent.describe();
  EXPECT_FALSE(process_alive(polite));
  EXPECT_FALSE(process_alive(stubborn));
}

// Exit codes, restartPolicy OnFailure (restart count), a missing command
// (StartError), and a log tail as the termination message when asked.
TEST(NodeAgent, ReportsExitCodesRestartsAndTerminationMessages) {
  Namespace ns;
  Agent agent(unique("exit"));
  const std::string n = ns.name();
  const std::string flag = (agent.state() / "flag").string();
  ASSERT_TRUE(api().create(kube::kPods, n, sh_pod("fails", agent.node(), "echo bad config: d_model; exit 1",
                                                  {{"terminationMessagePolicy", "FallbackToLogsOnError"}})).ok());
  ASSERT_TRUE(api().create(kube::kPods, n, sh_pod("retry", agent.node(),
                                                  "test -f " + flag + " && exit 0; touch " + flag + "; exit 3", {},
                                                  {{"restartPolicy", "OnFailure"}})).ok());
  // The termination message file (the kubelet's rule): what the container
  // wrote there, on success too; it wins over the log tail on a failure.
  ASSERT_TRUE(api().create(kube::kPods, n, sh_pod("wrote", agent.node(),
                                                  "echo log line; echo 'weft-progress {\"step\":7}' > /dev/termination-log",
                                                  {{"terminationMessagePolicy", "FallbackToLogsOnError"}})).ok());
  ASSERT_TRUE(api().create(kube::kPods, n, sh_pod("elsewhere", agent.node(),
                                                  "echo last words > /tmp/custom-log; echo log line; exit 2",
                                                  {{"terminationMessagePolicy", "FallbackToLogsOnError"},
                                                   {"terminationMessagePath", "/tmp/custom-log"}})).ok());
  Json nocmd = sh_pod("nocmd", agent.node(), "");
  nocmd["spec"]["containers"][0]["command"] = {"no-such-binary-weft"};
  ASSERT_TRUE(api().create(kube::kPods, n, nocmd).ok());

  ASSERT_TRUE(eventually([&] { return phase(n, "fails") == "Failed"; })) << what_happened(agent, n, {"fails"});
  Json fails = get_pod(n, "fails");
  EXPECT_EQ(exit_code(fails), 1);
  EXPECT_NE(fails["status"]["containerStatuses"][0]["state"]["terminated"].value("message", "").find("bad config: d_model"),
            std::string::npos)
      << fails["status"].dump();
  ASSERT_TRUE(eventually([&] { return phase(n, "retry") == "Succeeded"; })) << what_happened(agent, n, {"retry"});
  EXPECT_EQ(get_pod(n, "retry")["status"]["containerStatuses"][0]["restartCount"], 1);
  EXPECT_EQ(get_pod(n, "retry")["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"], 3);
  ASSERT_TRUE(eventually([&] { return phase(n, "wrote") == "Succeeded"; })) << what_happened(agent, n, {"wrote"});
  EXPECT_EQ(get_pod(n, "wrote")["status"]["containerStatuses"][0]["state"]["terminated"].value("message", ""),
            "weft-progress {\"step\":7}\n");
  ASSERT_TRUE(eventually([&] { return phase(n, "elsewhere") == "Failed"; })) << what_happened(agent, n, {"elsewhere"});
  EXPECT_EQ(get_pod(n, "elsewhere")["status"]["containerStatuses"][0]["state"]["terminated"].value("message", ""),
            "last words\n");
  ASSERT_TRUE(eventually([&] { return phase(n, "nocmd") == "Failed"; })) << what_happened(agent, n, {"nocmd"});
  Json nc = get_pod(n, "nocmd");
  EXPECT_EQ(exit_code(nc), 128);
  EXPECT_EQ(nc["status"]["containerStatuses"][0]["state"]["terminated"]["reason"], "StartError");
}

// A pod's ServiceAccount credentials where a program in it looks for them:
// the token (a TokenRequest bound to the pod on current API servers, the
// token Secret on 1.20), the cluster's CA and the namespace; the token is
// the API server's for that ServiceAccount.
TEST(NodeAgent, MountsTheServiceAccountToken) {
  Namespace ns;
  Agent agent(unique("sa"));
  const std::string n = ns.name();
  const std::string dir = "/var/run/secrets/kubernetes.io/serviceaccount";
  ASSERT_TRUE(api().create(kube::kPods, n, sh_pod("creds", agent.node(),
                                                  "cat " + dir + "/namespace; echo; grep -c 'BEGIN CERTIFICATE' " +
                                                      dir + "/ca.crt; cat " + dir + "/token")).ok());
  ASSERT_TRUE(eventually([&] { return phase(n, "creds") == "Succeeded"; }, 60s)) << what_happened(agent, n, {"creds"});
  std::istringstream out(pod_log(agent, n, get_pod(n, "creds")));
  std::string got_ns, certs, token;
  std::getline(out, got_ns);
  std::getline(out, certs);
  std::getline(out, token);
  EXPECT_EQ(got_ns, n);
  EXPECT_EQ(certs, "1");
  // A JWT whose subject the API server resolves to the ServiceAccount.
  ASSERT_EQ(std::count(token.begin(), token.end(), '.'), 2) << token;
  kube::ClusterConfig as_pod = api().cluster();
  as_pod.client_cert_pem.clear();
  as_pod.client_key_pem.clear();
  as_pod.bearer_token = token;
  kube::KubeApi pod_api(as_pod, kube::ApiOptions{200, 400});
  auto self = pod_api.get(kube::kPods, n, "creds");
  ASSERT_FALSE(self.ok()) << "the default ServiceAccount may not read pods";
  EXPECT_NE(self.error().message.find("system:serviceaccount:" + n + ":default"), std::string::npos)
      << self.error().message;
}

// A condition another writer puts on a pod (the API server adds
// DisruptionTarget before an eviction deletes it; the operator tells an
// eviction from a deletion by it) outlives the agent's next status writes:
// the agent merges its conditions by type instead of replacing the list.
TEST(NodeAgent, KeepsPodConditionsOthersSet) {
  Namespace ns;
  Agent agent(unique("cond"));
  const std::string n = ns.name();
  const std::string flag = (agent.state() / "done").string();
  ASSERT_TRUE(api().create(kube::kPods, n, sh_pod("marked", agent.node(),
                                                  "while [ ! -f " + flag + " ]; do sleep 0.1; done; exit 0")).ok());
  ASSERT_TRUE(eventually([&] { return phase(n, "marked") == "Running"; })) << what_happened(agent, n, {"marked"});
  // A read-modify-write of the status, as the eviction does it (a conflict
  // with the agent's own write is retried).
  bool added = eventually([&] {
    Json p = get_pod(n, "marked");
    if (p.is_null()) return false;
    p["status"]["conditions"].push_back({{"type", "DisruptionTarget"}, {"status", "True"},
                                         {"reason", "EvictionByEvictionAPI"},
                                         {"message", "Eviction API: evicting"},
                                         {"lastTransitionTime", kube::format_time(std::chrono::system_clock::now())}});
    return api().update_status(kube::kPods, n, p).ok();
  });
  ASSERT_TRUE(added) << what_happened(agent, n, {"marked"});
  std::ofstream(flag) << "1";
  ASSERT_TRUE(eventually([&] { return phase(n, "marked") == "Succeeded"; })) << what_happened(agent, n, {"marked"});
  Json p = get_pod(n, "marked");
  std::map<std::string, std::string> conds;
  for (const auto& c : p["status"]["conditions"]) conds[c.value("type", "")] = c.value("status", "");
  EXPECT_EQ(conds["DisruptionTarget"], "True") << p["status"].dump();
  EXPECT_EQ(conds["Ready"], "False") << "the agent's own conditions still follow the container\n" << p["status"].dump();
  EXPECT_EQ(conds["PodScheduled"], "True") << p["status"].dump();
}

// A program in a pod finds its siblings in the agent's bin dir even when a
// volume covers it (a build tree in /tmp under the pod's /tmp emptyDir:
// weft-run starts weft-worker from its own directory).
TEST(NodeAgent, BinDirStaysVisibleUnderAVolume) {
  Namespace ns;
  Agent agent(unique("bindir"));
  const std::string n = ns.name();
  const std::string bin = fs::canonical(WEFT_BIN_DIR).string();
  const std::string build = fs::path(bin).parent_path().string();
  Json pod = sh_pod("covered", agent.node(),
                    "test -x " + bin + "/weft-node && test ! -e " + build + "/CMakeCache.txt",
                    {{"volumeMounts", {{{"name", "cover"}, {"mountPath", build}}}}},
                    {{"volumes", {{{"name", "cover"}, {"emptyDir", Json::object()}}}}});
  ASSERT_TRUE(api().create(kube::kPods, n, pod).ok());
  ASSERT_TRUE(eventually([&] {
    const std::string p = phase(n, "covered");
    return p == "Succeeded" || p == "Failed";
  })) << what_happened(agent, n, {"covered"});
  EXPECT_EQ(phase(n, "covered"), "Succeeded") << get_pod(n, "covered")["status"].dump();
}

// An agent killed with SIGKILL leaves its pods running; restarted, it adopts
// the ones that still exist (and reports how they end) and kills and
// removes the ones deleted meanwhile.
TEST(NodeAgent, RestartedAgentAdoptsItsPodsAndCleansUpDeletedOnes) {
  Namespace ns;
  Agent agent(unique("adopt"));
  const std::string n = ns.name();
  const std::string go = (agent.state() / "go").string();
  ASSERT_TRUE(api().create(kube::kPods, n, sh_pod("keeper", agent.node(),
                                                  "while ! test -f " + go + "; do sleep 0.1; done; exit 7")).ok());
  ASSERT_TRUE(api().create(kube::kPods, n, sh_pod("goner", agent.node(), "while true; do sleep 0.1; done", {},
                                                  {{"terminationGracePeriodSeconds", 1}})).ok());
  ASSERT_TRUE(eventually([&] { return phase(n, "keeper") == "Running" && phase(n, "goner") == "Running"; }))
      << what_happened(agent, n, {"keeper", "goner"});
  const std::string keeper_ip = get_pod(n, "keeper")["status"].value("podIP", "");
  const std::string goner_uid = get_pod(n, "goner")["metadata"].value("uid", "");
  // The shim writes pid.json once the command is exec'd, which can be just
  // after the pod is reported Running.
  const std::string pid_file = agent.state().string() + "/pods/" + goner_uid + "/runs/0/pid.json";
  auto goner_pid = read_json(pid_file);
  ASSERT_TRUE(eventually([&] { return bool(goner_pid = read_json(pid_file)); })) << agent.describe();
  agent.stop(SIGKILL);
  // While the agent is down: one pod is force-deleted, the other finishes.
  api().remove(kube::kPods, n, "goner", kube::Propagation::Background, "", 0);
  std::ofstream(go) << "go";
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(process_alive(goner_pid->value("pid", -1))) << "pods outlive a killed agent";
  agent.start();
  ASSERT_TRUE(eventually([&] { return phase(n, "keeper") == "Failed"; })) << what_happened(agent, n, {"keeper"});
  Json keeper = get_pod(n, "keeper");
  EXPECT_EQ(exit_code(keeper), 7);
  EXPECT_EQ(keeper["status"].value("podIP", ""), keeper_ip) << "adopted pod keeps its IP";
  EXPECT_TRUE(eventually([&] { return !process_alive(goner_pid->value("pid", -1)); }, 10s)) << agent.describe();
  EXPECT_TRUE(eventually([&] { return !fs::exists(agent.state().string() + "/pods/" + goner_uid); }, 10s))
      << agent.describe();
}

}  // namespace
}  // namespace weft::node
