// The operator under a misbehaving network and control plane: watch streams
// cut by a proxy, and the API server restarted mid-test. In every case it
// must resume (or relist) and converge, and never create a second pod for a
// rank.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "integration/harness.h"
#include "integration/tcp_proxy.h"
#include "kube/kube_config.h"
#include "trainingjob/constants.h"
#include "weft_contract.h"

namespace weft::it {
namespace {

std::map<std::string, std::string> read_env(const std::string& dir) {
  std::map<std::string, std::string> env;
  std::ifstream in(dir + "/env");
  std::string line;
  while (std::getline(in, line))
    if (auto eq = line.find('='); eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  return env;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A kubeconfig identical to `src` but pointing at 127.0.0.1:port.
std::string kubeconfig_via(const std::string& src, int port, const std::string& out) {
  std::string text = read_file(src);
  auto pos = text.find("server: https://127.0.0.1:");
  auto end = text.find('\n', pos);
  text.replace(pos, end - pos, "server: https://127.0.0.1:" + std::to_string(port));
  std::ofstream(out) << text;
  return out;
}

// Every pod name exists once and every job has exactly `replicas` live pods
// of one attempt.
::testing::AssertionResult converged(kube::KubeApi& api, const std::string& ns, const std::string& job, size_t replicas,
                                     const std::string& attempt) {
  kube::ListOptions o;
  o.label_selector = std::string(tj::kLabelJob) + "=" + job;
  auto pods = api.list(kube::kPods, ns, o);
  if (!pods) return ::testing::AssertionFailure() << pods.error().message;
  std::set<std::string> ranks;
  for (const auto& p : pods->items) {
    if (p["metadata"]["labels"][tj::kLabelAttempt] != attempt)
      return ::testing::AssertionFailure() << p["metadata"]["name"] << " has attempt " << p["metadata"]["labels"][tj::kLabelAttempt];
    if (!ranks.insert(p["metadata"]["labels"][tj::kLabelRank].get<std::string>()).second)
      return ::testing::AssertionFailure() << "duplicate rank " << p["metadata"]["labels"][tj::kLabelRank];
  }
  if (ranks.size() != replicas) return ::testing::AssertionFailure() << ranks.size() << " pods, want " << replicas;
  return ::testing::AssertionSuccess();
}

TEST(Robustness, WatchesCutByAProxyResumeAndConverge) {
  TestNamespace ns("it-proxy");
  auto env = read_env(env_dir());
  TcpProxy proxy(std::stoi(env.at("APISERVER_PORT")));
  const std::string kc = kubeconfig_via(kubeconfig_path(), proxy.port(), env_dir() + "/kubeconfig-proxy-" + ns.name());
  InProcessOperator op(ns.name(), kc);
  ASSERT_TRUE(eventually([&] { return op.controller().workers_running(); }));

  std::atomic<bool> cutting{true};
  std::thread cutter([&] {
    while (cutting) {
      std::this_thread::sleep_for(400ms);
      proxy.cut_all();
    }
  });
  ASSERT_TRUE(admin_api().create(kube::kTrainingJobs, ns.name(), job_json("cut-a", 3)).ok());
  ASSERT_TRUE(eventually([&] { return converged(admin_api(), ns.name(), "cut-a", 3, "0"); }, 60s));
  // Let several cuts land on established watches before changing the world.
  ASSERT_TRUE(eventually([&] { return proxy.cuts() >= 3; }, 10s));
  set_pod_phase(ns.name(), "cut-a-2", "Failed", contract::kExitPeerLost);
  ASSERT_TRUE(admin_api().create(kube::kTrainingJobs, ns.name(), job_json("cut-b", 2)).ok());
  ASSERT_TRUE(eventually([&] { return converged(admin_api(), ns.name(), "cut-a", 3, "1"); }, 60s));
  ASSERT_TRUE(eventually([&] { return converged(admin_api(), ns.name(), "cut-b", 2, "0"); }, 60s));
  ASSERT_TRUE(eventually([&] { return proxy.cuts() >= 6; }, 10s));
  cutting = false;
  cutter.join();
  // Quiet again: the state must stay converged (no late duplicates, no extra restarts).
  std::this_thread::sleep_for(1500ms);
  EXPECT_TRUE(converged(admin_api(), ns.name(), "cut-a", 3, "1"));
  EXPECT_TRUE(converged(admin_api(), ns.name(), "cut-b", 2, "0"));
  EXPECT_EQ(status_of(ns.name(), "cut-a")["restarts"], 1);
  EXPECT_GE(proxy.cuts(), 6);
  EXPECT_GT(op.controller().pods().watches(), 3) << "watches were never re-established";
}

// Restarting the API server would break every other test sharing the
// fixture, so this one runs its own control plane.
class OwnControlPlane : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / unique_name("weft-it-restart");
    std::filesystem::create_directories(dir_);
    ASSERT_EQ(sh("start"), 0) << "testenv start failed:\n" << read_file(dir_ / "testenv.out");
    ASSERT_EQ(std::system(("kubectl --kubeconfig " + kc() + " apply --validate=false -f " WEFT_SOURCE_DIR
                           "/manifests/crd/ >/dev/null && kubectl --kubeconfig " + kc() +
                           " wait --for condition=established crd/trainingjobs.weft.dev --timeout=60s >/dev/null")
                              .c_str()),
              0);
    api_ = std::make_unique<kube::KubeApi>(kube::load_kubeconfig(kc()));
  }
  void TearDown() override {
    api_.reset();
    sh("stop");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  int sh(const std::string& cmd) {
    return std::system((std::string(WEFT_SOURCE_DIR) + "/tests/kube/testenv.sh " + cmd + " " + dir_.string() +
                        " >>" + dir_.string() + "/testenv.out 2>&1")
                           .c_str());
  }
  std::string kc() const { return (dir_ / "kubeconfig").string(); }
  std::filesystem::path dir_;
  std::unique_ptr<kube::KubeApi> api_;
};

TEST_F(OwnControlPlane, ApiServerRestartMidTestConverges) {
  InProcessOperator op("default", kc());
  ASSERT_TRUE(api_->create(kube::kTrainingJobs, "default", job_json("rs-a", 3)).ok());
  ASSERT_TRUE(eventually([&] { return converged(*api_, "default", "rs-a", 3, "0"); }, 30s));
  const long watches_before = op.controller().jobs().watches();

  ASSERT_EQ(sh("restart-apiserver"), 0) << "apiserver did not come back";
  // Changes made right after the restart must reach the operator through
  // re-established watches (or a relist).
  auto fail = api_->merge_patch(kube::kPods, "default", "rs-a-1",
                                {{"status", {{"phase", "Failed"},
                                             {"containerStatuses", {{{"name", "worker"}, {"image", "x"}, {"imageID", ""},
                                                                     {"restartCount", 0}, {"ready", false},
                                                                     {"state", {{"terminated", {{"exitCode", 3}}}}}}}}}}},
                                true);
  ASSERT_TRUE(fail.ok()) << fail.error().message;
  ASSERT_TRUE(api_->create(kube::kTrainingJobs, "default", job_json("rs-b", 2)).ok());
  ASSERT_TRUE(eventually([&] { return converged(*api_, "default", "rs-a", 3, "1"); }, 60s));
  ASSERT_TRUE(eventually([&] { return converged(*api_, "default", "rs-b", 2, "0"); }, 60s));
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(converged(*api_, "default", "rs-a", 3, "1"));
  auto job = api_->get(kube::kTrainingJobs, "default", "rs-a");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["status"]["restarts"], 1);
  EXPECT_GT(op.controller().jobs().watches(), watches_before);
}

}  // namespace
}  // namespace weft::it
