// Shared pieces of the operator integration tests, which run against the
// real kube-apiserver/controller-manager/scheduler of the `kube` ctest
// fixture. Each test gets its own namespace and its own operator scoped to
// it, so tests can run in parallel against one API server. No kubelet
// exists: tests play the kubelet by writing pod status through the status
// subresource.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kube/informer.h"
#include "kube/kube_api.h"
#include "support/net.h"
#include "trainingjob/controller.h"
#include "trainingjob/operator_metrics.h"

namespace weft::it {

using Json = nlohmann::json;
using namespace std::chrono_literals;

std::string env_dir();                      // the fixture's state dir
std::string kubeconfig_path();
kube::KubeApi& admin_api();                 // shared admin client for test actions
std::string unique_name(const std::string& prefix);

// Polls `pred` every 50 ms until true or timeout, scaled to the host
// (support/host_speed.h); returns the final value.
bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 30s);

class TestNamespace {
 public:
  explicit TestNamespace(const std::string& prefix);
  ~TestNamespace();
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

// The operator's controller in this process, with its own KubeApi (so its
// API calls can be counted), watching one namespace.
class InProcessOperator {
 public:
  explicit InProcessOperator(const std::string& ns, const std::string& kubeconfig = "");
  // opts.ns is the namespace it watches.
  explicit InProcessOperator(tj::ControllerOptions opts, const std::string& kubeconfig = "");
  ~InProcessOperator();
  kube::KubeApi& api() { return *api_; }
  tj::Controller& controller() { return *controller_; }
  // The operator's weft_operator_* metrics, in the text format.
  std::string metrics_text() const;

 private:
  std::unique_ptr<prometheus::Registry> registry_;
  std::unique_ptr<tj::OperatorMetrics> metrics_;
  std::unique_ptr<kube::KubeApi> api_;
  std::unique_ptr<tj::Controller> controller_;
};

// Test actions on TrainingJobs (the admin client); a refused one fails the test.
void create_job(const std::string& ns, const Json& job);
void patch_job_spec(const std::string& ns, const std::string& name, const Json& spec);  // merge patch

// A test with a namespace of its own and an in-process operator watching it.
class OperatorTest : public ::testing::Test {
 protected:
  explicit OperatorTest(const std::string& ns_prefix) : ns_(ns_prefix) {}
  void SetUp() override { op_ = std::make_unique<InProcessOperator>(ns_.name()); }
  void TearDown() override { op_.reset(); }
  const std::string& ns() const { return ns_.name(); }
  void create(const Json& job) { create_job(ns(), job); }
  void patch_spec(const std::string& name, const Json& spec) { patch_job_spec(ns(), name, spec); }
  // What a (gang) scheduler writes on a pod it cannot place or holds back.
  void unschedulable(const std::string& pod, const std::string& message);
  // Live reads of this namespace's jobs: the pods of one attempt, whether
  // the gang is exactly N pods of that attempt, a condition by type ({} if none).
  std::vector<Json> pods_of_attempt(const std::string& job, int attempt);
  bool gang_is(const std::string& job, size_t pods, int attempt);
  Json condition(const std::string& job, const std::string& type);

  TestNamespace ns_;
  std::unique_ptr<InProcessOperator> op_;
};

// Test-side views of the world (live reads, not caches).
Json job_json(const std::string& name, int replicas);
std::optional<Json> get_job(const std::string& ns, const std::string& name);
std::vector<Json> job_pods(const std::string& ns, const std::string& job, bool include_terminating = false);
std::string phase_of(const std::string& ns, const std::string& job);
Json status_of(const std::string& ns, const std::string& job);
std::string env_value(const Json& pod, const std::string& name);

// Plays the kubelet: writes phase (and, for terminated phases, the worker
// container's exit code) through the pod status subresource. `ready` (the
// readiness probe's verdict) defaults to whether the phase is Running.
void set_pod_phase(const std::string& ns, const std::string& pod, const std::string& phase,
                   std::optional<int> exit_code = std::nullopt, std::optional<bool> ready = std::nullopt);
void set_all_running(const std::string& ns, const std::string& job);

// A weft-operator child process; SIGTERM on destruction.
class OperatorProcess {
 public:
  OperatorProcess(const std::vector<std::string>& args, const std::string& log_path);
  ~OperatorProcess();
  void terminate();   // SIGTERM and wait
  void kill();        // SIGKILL and wait
  bool running() const;
  int pid() const { return pid_; }

 private:
  int pid_ = -1;
};

using weft::testing::free_port;
using weft::testing::http_get;  // .status (0 if unreachable) and .body

}  // namespace weft::it
