#include "integration/harness.h"

#include <prometheus/text_serializer.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <random>

#include "kube/kube_config.h"
#include "support/host_speed.h"
#include <fstream>

#include "trainingjob/constants.h"

namespace weft::it {

std::string env_dir() {
  const char* e = std::getenv("WEFT_KUBE_ENV_DIR");
  return e && *e ? e : WEFT_KUBE_ENV_DIR;
}

std::string kubeconfig_path() { return env_dir() + "/kubeconfig"; }

kube::KubeApi& admin_api() {
  static kube::KubeApi api(kube::load_kubeconfig(kubeconfig_path()), kube::ApiOptions{200, 400});
  return api;
}

std::string unique_name(const std::string& prefix) {
  static std::mt19937 rng(std::random_device{}());
  char buf[8];
  std::snprintf(buf, sizeof buf, "%05x", static_cast<unsigned>(rng() & 0xfffff));
  return prefix + "-" + buf;
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + testing::scaled(timeout);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return pred();
}

TestNamespace::TestNamespace(const std::string& prefix) : name_(unique_name(prefix)) {
  auto r = admin_api().create(kube::kNamespaces, "", {{"apiVersion", "v1"}, {"kind", "Namespace"},
                                                      {"metadata", {{"name", name_}}}});
  if (!r) ADD_FAILURE() << "create namespace " << name_ << ": " << r.error().message;
  // Pods are admitted only once the namespace's default ServiceAccount exists.
  bool sa = eventually([&] { return admin_api().get(kube::Resource{"", "v1", "serviceaccounts", "ServiceAccount"},
                                                    name_, "default").ok(); });
  if (!sa) ADD_FAILURE() << "default ServiceAccount never appeared in " << name_;
}

TestNamespace::~TestNamespace() { admin_api().remove(kube::kNamespaces, "", name_); }

namespace {
tj::ControllerOptions two_workers(const std::string& ns) {
  tj::ControllerOptions o;
  o.ns = ns;
  o.workers = 2;
  o.resync = std::chrono::seconds(30);
  return o;
}
}  // namespace

InProcessOperator::InProcessOperator(const std::string& ns, const std::string& kubeconfig)
    : InProcessOperator(two_workers(ns), kubeconfig) {}

InProcessOperator::InProcessOperator(tj::ControllerOptions opts, const std::string& kubeconfig)
    : registry_(std::make_unique<prometheus::Registry>()),
      metrics_(std::make_unique<tj::OperatorMetrics>(*registry_)) {
  api_ = std::make_unique<kube::KubeApi>(kube::load_kubeconfig(kubeconfig.empty() ? kubeconfig_path() : kubeconfig),
                                         kube::ApiOptions{100, 200});
  controller_ = std::make_unique<tj::Controller>(*api_, std::move(opts), metrics_.get());
  controller_->start_informers();
  controller_->start_workers();
}

InProcessOperator::~InProcessOperator() { controller_->stop(); }

std::string InProcessOperator::metrics_text() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

Json job_json(const std::string& name, int replicas) {
  return {{"apiVersion", "weft.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"replicas", replicas},
            {"image", "ghcr.io/weft-dev/weft:test"},
            {"restartPolicy", {{"maxRestarts", 3}, {"backoffSeconds", 1}, {"maxBackoffSeconds", 2}}},
            {"worker", {{"preset", "tiny"}, {"parallel", {{"strategy", "dp"}, {"bucket_cap_mb", 4}}}}}}}};
}

void create_job(const std::string& ns, const Json& job) {
  auto r = admin_api().create(kube::kTrainingJobs, ns, job);
  ASSERT_TRUE(r.ok()) << r.error().message;
}

void patch_job_spec(const std::string& ns, const std::string& name, const Json& spec) {
  auto r = admin_api().merge_patch(kube::kTrainingJobs, ns, name, {{"spec", spec}});
  ASSERT_TRUE(r.ok()) << r.error().message;
}

std::optional<Json> get_job(const std::string& ns, const std::string& name) {
  auto r = admin_api().get(kube::kTrainingJobs, ns, name);
  if (!r) return std::nullopt;
  return *r;
}

std::vector<Json> job_pods(const std::string& ns, const std::string& job, bool include_terminating) {
  kube::ListOptions o;
  o.label_selector = std::string(tj::kLabelJob) + "=" + job;
  auto r = admin_api().list(kube::kPods, ns, o);
  std::vector<Json> out;
  if (!r) return out;
  for (auto& p : r->items)
    if (include_terminating || !p["metadata"].contains("deletionTimestamp")) out.push_back(p);
  return out;
}

Json status_of(const std::string& ns, const std::string& job) {
  auto j = get_job(ns, job);
  return j && j->contains("status") ? (*j)["status"] : Json::object();
}

std::string phase_of(const std::string& ns, const std::string& job) { return status_of(ns, job).value("phase", ""); }

std::vector<Json> OperatorTest::pods_of_attempt(const std::string& job, int attempt) {
  std::vector<Json> out;
  for (const auto& p : job_pods(ns(), job))
    if (p["metadata"]["labels"].value(tj::kLabelAttempt, "") == std::to_string(attempt)) out.push_back(p);
  return out;
}

bool OperatorTest::gang_is(const std::string& job, size_t pods, int attempt) {
  return pods_of_attempt(job, attempt).size() == pods && job_pods(ns(), job, true).size() == pods;
}

Json OperatorTest::condition(const std::string& job, const std::string& type) {
  for (const auto& c : status_of(ns(), job).value("conditions", Json::array()))
    if (c.value("type", "") == type) return c;
  return Json::object();
}

std::string env_value(const Json& pod, const std::string& name) {
  for (const auto& e : pod["spec"]["containers"][0]["env"])
    if (e["name"] == name) return e.value("value", "");
  return "";
}

void OperatorTest::unschedulable(const std::string& pod, const std::string& message) {
  Json patch = {{"status",
                 {{"conditions",
                   {{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"},
                     {"message", message}}}}}}};
  auto r = admin_api().merge_patch(kube::kPods, ns(), pod, patch, true);
  ASSERT_TRUE(r.ok()) << r.error().message;
}

void set_pod_phase(const std::string& ns, const std::string& pod, const std::string& phase,
                   std::optional<int> exit_code, std::optional<bool> ready_opt) {
  const bool ready = ready_opt.value_or(phase == "Running");
  Json cs = {{"name", tj::kContainerName}, {"image", "ghcr.io/weft-dev/weft:test"}, {"imageID", ""},
             {"restartCount", 0}, {"ready", ready}};
  if (phase == "Running") cs["state"] = {{"running", {{"startedAt", "2026-01-01T00:00:00Z"}}}};
  if (exit_code)
    cs["state"] = {{"terminated", {{"exitCode", *exit_code}, {"reason", *exit_code == 0 ? "Completed" : "Error"},
                                   {"startedAt", "2026-01-01T00:00:00Z"}, {"finishedAt", "2026-01-01T00:01:00Z"}}}};
  Json patch = {{"status",
                 {{"phase", phase},
                  {"conditions", {{{"type", "Ready"}, {"status", ready ? "True" : "False"}}}},
                  {"containerStatuses", {cs}}}}};
  // As a kubelet writes it: a strategic merge patch, so the conditions others
  // own (the scheduler's PodScheduled; no node runs here, so it reports the
  // pods unschedulable) stay. A JSON merge patch would drop them and the
  // scheduler would write them back seconds later, changing the pods behind
  // the operator's back.
  auto r = admin_api().strategic_merge_patch(kube::kPods, ns, pod, patch, true);
  if (!r) ADD_FAILURE() << "set " << pod << " " << phase << ": " << r.error().message;
}

void set_all_running(const std::string& ns, const std::string& job) {
  for (const auto& p : job_pods(ns, job)) set_pod_phase(ns, p["metadata"]["name"], "Running");
}

OperatorProcess::OperatorProcess(const std::vector<std::string>& args, const std::string& log_path) {
  std::string bin = std::string(WEFT_BIN_DIR) + "/weft-operator";
  pid_ = ::fork();
  if (pid_ == 0) {
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(bin.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    _exit(127);
  }
}

OperatorProcess::~OperatorProcess() { terminate(); }

bool OperatorProcess::running() const { return pid_ > 0 && ::kill(pid_, 0) == 0; }

void OperatorProcess::terminate() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(50ms);
  }
  kill();
}

void OperatorProcess::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace weft::it
