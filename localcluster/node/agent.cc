#include "node/agent.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <thread>

#include "kube/clock.h"
#include "node/hosts_file.h"
#include "node/pod_process.h"
#include "node/volumes.h"
#include "scrape/http_scraper.h"

namespace weft::node {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct NodeAgent::Entry {
  std::string uid, ns, name, node, ip, dir, log_dir;
  std::string start_time;                 // RFC 3339, when first accepted
  std::string container, image, restart_policy = "Always";
  bool logs_on_error = false;
  int run = -1;                           // current run (-1: never started)
  pid_t shim_pid = -1;
  unsigned long long shim_ticks = 0;
  pid_t worker_pid = -1;
  bool running = false;
  ContainerState state;
  std::optional<ContainerState> last_state;
  int restart_count = 0;
  Clock::time_point retry_at{};           // next start attempt
  bool term_sent = false, kill_sent = false;
  Clock::time_point kill_at{};
  Json last_status_sig;                   // last status written, transition times removed
  std::optional<bool> probe_ready;        // readiness probe's last verdict (nullopt: no probe)
  Clock::time_point next_probe{};
  std::vector<VolumeSpec> volumes;        // ConfigMap/Secret volumes are refreshed
  std::map<std::string, size_t> volume_digest;

  std::string run_dir() const { return dir + "/runs/" + std::to_string(run); }
  std::string log_file() const { return log_dir + "/" + container + "/" + std::to_string(run) + ".log"; }
};

namespace {

const kube::Resource kServiceAccounts{"", "v1", "serviceaccounts", "ServiceAccount"};

std::string now_str() { return kube::format_time(std::chrono::system_clock::now()); }

size_t digest(const std::map<std::string, std::string>& files) {
  size_t h = 0;
  for (const auto& [k, v] : files) h = h * 1000003u ^ std::hash<std::string>{}(k) ^ (std::hash<std::string>{}(v) << 1);
  return h;
}

Json status_signature(Json st) {
  if (st.contains("conditions"))
    for (auto& c : st["conditions"]) c.erase("lastTransitionTime");
  return st;
}

std::string meta_str(const Json& obj, const char* key) { return obj["metadata"].value(key, ""); }

bool being_deleted(const Json& pod) {
  return pod["metadata"].contains("deletionTimestamp") && !pod["metadata"]["deletionTimestamp"].is_null();
}

}  // namespace

NodeAgent::NodeAgent(kube::KubeApi& api, AgentOptions opts)
    : api_(api),
      opts_(std::move(opts)),
      my_nodes_(opts_.nodes.begin(), opts_.nodes.end()),
      pods_(api, kube::kPods, "", "", std::chrono::seconds(60)),
      services_(api, kube::kServices, "", "", std::chrono::seconds(300)),
      configmaps_(api, kube::kConfigMaps, "", "", std::chrono::seconds(300)),
      secrets_(api, kube::kSecrets, "", "", std::chrono::seconds(300)),
      ips_(opts_.ip_second_octet) {
  for (const auto& d : opts_.start_delays) start_delays_.emplace_back(std::regex(d.pattern), d.delay);
  if (opts_.simulate_pods) sim_ = std::make_unique<SimulatedRanks>(opts_.simulated_step_seconds);
  pods_.add_handler([this](const Json&) { ++cluster_generation_, wake(); });
  services_.add_handler([this](const Json&) { ++cluster_generation_, wake(); });
  configmaps_.add_handler([this](const Json&) { ++object_generation_, wake(); });
  secrets_.add_handler([this](const Json&) { ++object_generation_, wake(); });
}

NodeAgent::~NodeAgent() = default;

namespace {
// The current pod's longest step on this thread (the slow-pass log).
thread_local std::pair<std::string, double> t_longest_step;
}  // namespace

template <typename F>
auto NodeAgent::timed(const char* what, F&& f) {
  const auto t0 = Clock::now();
  struct Note {
    const char* what;
    Clock::time_point t0;
    ~Note() {
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (s > t_longest_step.second) t_longest_step = {what, s};
    }
  } note{what, t0};
  return f();
}

void NodeAgent::wake() {
  std::lock_guard lock(mu_);
  woken_ = true;
  cv_.notify_all();
}

void NodeAgent::run(std::stop_token stop) {
  const auto t0 = Clock::now();
  auto since_start = [&t0] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  make_dirs(opts_.state_dir + "/pods");
  make_dirs(opts_.state_dir + "/logs");
  std::vector<std::jthread> threads;
  for (kube::Informer* inf : {&pods_, &services_, &configmaps_, &secrets_})
    threads.emplace_back([inf](std::stop_token st) { inf->run(st); });
  while (!stop.stop_requested()) {
    try {
      register_nodes();
      break;
    } catch (const std::exception& e) {
      spdlog::warn("registering nodes: {}; retrying", e.what());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  threads.emplace_back([this](std::stop_token st) {
    auto last_full = Clock::now();
    while (!st.stop_requested()) {
      for (auto until = Clock::now() + opts_.lease_renew; Clock::now() < until && !st.stop_requested();)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (st.stop_requested()) break;
      const bool full = Clock::now() - last_full >= opts_.node_status_every;
      if (full) last_full = Clock::now();
      heartbeat(full);
    }
  });
  for (kube::Informer* inf : {&pods_, &services_, &configmaps_, &secrets_})
    while (!stop.stop_requested() && !inf->wait_synced(std::chrono::milliseconds(200))) {
    }
  adopt_from_disk();
  ready_ = true;
  spdlog::info("weft-node: serving nodes {} (state {}), {:.1f} s after start", fmt::join(opts_.nodes, ", "),
               opts_.state_dir, since_start());
  while (!stop.stop_requested()) {
    // A slow pass is said with what took the time, so a pod that is late
    // to start can be told from an agent that was busy or blocked.
    const auto pass = Clock::now();
    const SyncReport report = sync_once();
    const double pass_s = std::chrono::duration<double>(Clock::now() - pass).count();
    if (pass_s >= 1.0)
      spdlog::warn("weft-node: a sync pass took {:.1f} s ({} pods; the slowest, {}, {:.1f} s: {})", pass_s, report.pods,
                   report.slowest, report.slowest_s, report.slowest_doing);
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, stop, opts_.sync_period, [this] { return woken_; });
    woken_ = false;
  }
  for (auto& t : threads) t.request_stop();
}

void NodeAgent::register_nodes() {
  const std::string now = now_str();
  for (const auto& n : opts_.nodes) {
    Json node = build_node(n, opts_.internal_ip, opts_.capacity, now);
    if (!opts_.taints.empty()) node["spec"]["taints"] = opts_.taints;
    auto created = api_.create(kube::kNodes, "", node);
    if (!created && !created.error().already_exists()) throw std::runtime_error("create node " + n + ": " + created.error().message);
    auto got = api_.get(kube::kNodes, "", n);
    if (!got) throw std::runtime_error("get node " + n + ": " + got.error().message);
    node_uids_[n] = (*got)["metadata"].value("uid", "");
    ready_since_[n] = now;
  }
  heartbeat(true);
}

void NodeAgent::heartbeat(bool full_status) {
  const auto now = std::chrono::system_clock::now();
  for (const auto& n : opts_.nodes) {
    Json lease = build_node_lease(n, node_uids_[n], opts_.lease_duration_seconds, kube::format_micro_time(now));
    auto cur = api_.get(kube::kLeases, "kube-node-lease", n);
    kube::Result<Json> res = cur ? kube::Result<Json>(Json()) : kube::Result<Json>(cur.error());
    if (cur) {
      Json updated = *cur;
      updated["spec"] = lease["spec"];
      res = api_.update(kube::kLeases, "kube-node-lease", updated);
    } else if (cur.error().not_found()) {
      res = api_.create(kube::kLeases, "kube-node-lease", lease);
    }
    if (!res) spdlog::warn("node {}: lease renewal failed: {}", n, res.error().message);
    if (full_status) {
      Json patch = {{"status", node_status_patch(n, opts_.internal_ip, opts_.capacity, kube::format_time(now),
                                                 ready_since_[n])}};
      auto p = api_.merge_patch(kube::kNodes, "", n, patch, true);
      if (!p) spdlog::warn("node {}: status update failed: {}", n, p.error().message);
    }
  }
}

void NodeAgent::save_record(const Entry& e) const {
  write_json_atomic(e.dir + "/record.json",
                    {{"uid", e.uid}, {"namespace", e.ns}, {"name", e.name}, {"node", e.node}, {"ip", e.ip},
                     {"startTime", e.start_time}, {"container", e.container}, {"image", e.image},
                     {"restartPolicy", e.restart_policy}, {"logsOnError", e.logs_on_error}, {"run", e.run},
                     {"restartCount", e.restart_count}, {"shimPid", e.shim_pid}, {"shimTicks", e.shim_ticks},
                     {"logDir", e.log_dir}});
}

void NodeAgent::adopt_from_disk() {
  std::error_code ec;
  if (sim_) return;  // simulated pods keep nothing on disk: they are started afresh
  for (const auto& d : fs::directory_iterator(opts_.state_dir + "/pods", ec)) {
    auto rec = read_json(d.path().string() + "/record.json");
    if (!rec) {
      fs::remove_all(d.path(), ec);
      continue;
    }
    auto e = std::make_unique<Entry>();
    e->uid = rec->value("uid", "");
    e->ns = rec->value("namespace", "");
    e->name = rec->value("name", "");
    e->node = rec->value("node", "");
    e->ip = rec->value("ip", "");
    e->dir = d.path().string();
    e->log_dir = rec->value("logDir", "");
    e->start_time = rec->value("startTime", "");
    e->container = rec->value("container", "");
    e->image = rec->value("image", "");
    e->restart_policy = rec->value("restartPolicy", "Always");
    e->logs_on_error = rec->value("logsOnError", false);
    e->run = rec->value("run", -1);
    e->restart_count = rec->value("restartCount", 0);
    e->shim_pid = rec->value("shimPid", -1);
    e->shim_ticks = rec->value("shimTicks", 0ull);
    if (e->run >= 0) {
      e->running = true;  // refresh_process reads the run's files to learn more
      if (auto pid = read_json(e->run_dir() + "/pid.json")) {
        e->worker_pid = pid->value("pid", -1);
        e->state.started_at = pid->value("startedAt", "");
      }
      e->state.kind = ContainerState::Kind::Running;
    }
    ips_.reserve(e->ip);
    spdlog::info("adopting pod {}/{} (uid {}, ip {}, run {})", e->ns, e->name, e->uid, e->ip, e->run);
    entries_[e->uid] = std::move(e);
  }
}

void NodeAgent::refresh_process(Entry& e) {
  if (!e.running || sim_) return;  // a simulated container ends only when told (end_simulated)
  if (e.worker_pid < 0)
    if (auto pid = read_json(e.run_dir() + "/pid.json")) e.worker_pid = pid->value("pid", -1);
  auto ex = read_json(e.run_dir() + "/exit.json");
  if (!ex && !process_alive(e.shim_pid, e.shim_ticks)) {
    ex = read_json(e.run_dir() + "/exit.json");  // written just before the shim exited
    if (!ex && e.worker_pid > 0 && process_alive(e.worker_pid)) return;  // shim lost, container still runs
    if (!ex)
      ex = Json{{"exitCode", 137}, {"reason", "ContainerStatusUnknown"},
                {"message", "the container's shim exited without reporting a result"}, {"finishedAt", now_str()}};
  }
  if (!ex) return;
  e.running = false;
  // Kept with the logs, which outlive the pod (its directory goes with it).
  write_json_atomic(e.log_dir + "/" + e.container + "/" + std::to_string(e.run) + ".exit.json", *ex);
  ContainerState t;
  t.kind = ContainerState::Kind::Terminated;
  t.exit_code = ex->value("exitCode", 255);
  t.signal = ex->value("signal", 0);
  t.started_at = ex->value("startedAt", e.state.started_at);
  t.finished_at = ex->value("finishedAt", now_str());
  t.reason = ex->value("reason", "");
  t.message = ex->value("message", "");
  t.container_id = e.state.container_id;
  // The kubelet's rule: the container's termination message file (its first
  // 4 KiB), else, with FallbackToLogsOnError and a failure, the log's tail.
  if (std::string file; t.message.empty() && read_file(e.run_dir() + "/termination-log", &file))
    t.message = file.substr(0, 4096);
  if (t.message.empty() && e.logs_on_error && t.exit_code != 0) t.message = tail_of_file(e.log_file(), 80, 2048);
  e.state = t;
  spdlog::info("pod {}/{}: container exited with code {}", e.ns, e.name, t.exit_code);
}

bool NodeAgent::start_run(const Json& pod, Entry& e, std::string* reason, std::string* message) {
  // The lookups hand out raw pointers: `keep` holds the snapshots while planning.
  std::vector<kube::ObjectPtr> keep;
  ObjectLookup lookup;
  lookup.secret = [this, &keep](const std::string& ns, const std::string& name) -> const Json* {
    keep.push_back(secrets_.get(ns, name));
    return keep.back().get();
  };
  lookup.configmap = [this, &keep](const std::string& ns, const std::string& name) -> const Json* {
    keep.push_back(configmaps_.get(ns, name));
    return keep.back().get();
  };
  auto planned = plan_pod(pod, lookup, e.ip, opts_.internal_ip);
  if (auto* err = std::get_if<PlanError>(&planned)) {
    *reason = err->reason;
    *message = err->message;
    return false;
  }
  PodPlan& plan = std::get<PodPlan>(planned);
  e.container = plan.container;
  e.restart_policy = plan.restart_policy;
  e.logs_on_error = plan.logs_on_error;
  e.volumes = plan.volumes;
  const int run = e.run + 1;

  // Volumes.
  std::map<std::string, std::string> sources;  // volume -> host directory
  for (const auto& v : plan.volumes) {
    const std::string vdir = e.dir + "/volumes/" + v.name;
    if (v.kind == VolumeKind::HostPath) {
      sources[v.name] = v.host_path;
      std::error_code ec;
      const bool exists = fs::exists(v.host_path, ec);
      if (v.host_type == "DirectoryOrCreate") {
        if (auto err = make_dirs(v.host_path); !err.empty()) return *reason = "ContainerCreating", *message = err, false;
      } else if (v.host_type == "FileOrCreate" && !exists) {
        make_dirs(fs::path(v.host_path).parent_path().string());
        rewrite_in_place(v.host_path, "");
      } else if ((v.host_type == "Directory" || v.host_type == "File") && !exists) {
        *reason = "ContainerCreating";
        *message = "hostPath " + v.host_path + " does not exist (type " + v.host_type + ")";
        return false;
      }
    } else if (v.kind == VolumeKind::EmptyDir) {
      if (!fs::exists(vdir)) make_dirs(vdir, 0777);
      sources[v.name] = vdir;
    } else if (v.kind == VolumeKind::Projected) {
      // As the kubelet: each token requested for the pod's ServiceAccount,
      // bound to the pod (gone with it). Not refreshed: the ServiceAccount
      // admission's 3607 s tokens are issued for a year by API servers with
      // --service-account-extend-token-expiration (the default).
      std::map<std::string, std::string> files = v.files;
      for (const auto& t : v.tokens) {
        Json spec = {{"expirationSeconds", t.expiration_seconds},
                     {"boundObjectRef", {{"apiVersion", "v1"}, {"kind", "Pod"}, {"name", e.name},
                                         {"uid", pod["metadata"].value("uid", "")}}}};
        if (!t.audience.empty()) spec["audiences"] = Json::array({t.audience});
        auto res = api_.create_subresource(kServiceAccounts, e.ns, v.service_account, "token",
                                           {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenRequest"},
                                            {"spec", spec}});
        const std::string token = res ? res->value("status", Json::object()).value("token", "") : "";
        if (token.empty()) {
          *reason = "ContainerCreating";
          *message = "MountVolume.SetUp failed for volume \"" + v.name + "\": token of serviceaccount \"" +
                     v.service_account + "\": " + (res ? "no token in the answer" : res.error().message);
          return false;
        }
        files[t.path] = token;
      }
      if (auto err = write_atomic_dir(vdir, files, v.default_mode); !err.empty())
        return *reason = "ContainerCreating", *message = err, false;
      sources[v.name] = vdir;
    } else {
      const bool secret = v.kind == VolumeKind::Secret;
      auto obj = secret ? secrets_.get(e.ns, v.object) : configmaps_.get(e.ns, v.object);
      std::map<std::string, std::string> files;
      if (obj) {
        auto f = volume_files(*obj, v.items, secret);
        if (auto* bad = std::get_if<std::string>(&f)) {
          *reason = "ContainerCreating";
          *message = std::string(secret ? "secret" : "configmap") + " \"" + v.object + "\": " + *bad;
          return false;
        }
        files = std::get<0>(f);
      } else if (!v.optional) {
        *reason = "ContainerCreating";
        *message = "MountVolume.SetUp failed for volume \"" + v.name + "\": " + (secret ? "secret" : "configmap") +
                   " \"" + v.object + "\" not found";
        return false;
      }
      if (auto err = write_atomic_dir(vdir, files, v.default_mode); !err.empty())
        return *reason = "ContainerCreating", *message = err, false;
      e.volume_digest[v.name] = digest(files);
      sources[v.name] = vdir;
    }
  }
  LaunchSpec L;
  for (const auto& m : plan.mounts) {
    std::string src = sources[m.volume];
    if (!m.sub_path.empty()) {
      src += "/" + m.sub_path;
      if (!fs::exists(src)) make_dirs(src);
    }
    bool ro = m.read_only;
    for (const auto& v : plan.volumes)
      if (v.name == m.volume && v.kind != VolumeKind::EmptyDir && v.kind != VolumeKind::HostPath) ro = true;
    L.mounts.push_back({src, m.mount_path, ro});
  }

  // Environment: the pod's, then what a container runtime adds.
  std::vector<std::string> path_dirs = opts_.bin_dirs;
  bool has_path = false, has_home = false, has_bind = false;
  for (const auto& [k, v] : plan.env) {
    L.env.push_back(k + "=" + v);
    has_path |= k == "PATH";
    has_home |= k == "HOME";
    has_bind |= k == "WEFT_BIND_ADDR";
    if (k == "PATH") {
      size_t start = 0;
      for (size_t i = 0; i <= v.size(); ++i)
        if (i == v.size() || v[i] == ':') path_dirs.push_back(v.substr(start, i - start)), start = i + 1;
    }
  }
  std::string default_path;
  for (const auto& d : opts_.bin_dirs) default_path += d + ":";
  default_path += "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  if (!has_path) {
    L.env.push_back("PATH=" + default_path);
    for (const char* d : {"/usr/local/bin", "/usr/bin", "/bin"}) path_dirs.push_back(d);
  }
  if (!has_home) L.env.push_back("HOME=/root");
  L.env.push_back("HOSTNAME=" + plan.hostname);
  // The pod's network: its own loopback address, which the worker binds.
  if (!has_bind) L.env.push_back("WEFT_BIND_ADDR=" + e.ip);

  L.node_dirs = opts_.bin_dirs;
  L.argv = plan.argv;
  if (auto exe = find_executable(L.argv[0], path_dirs)) L.argv[0] = *exe;
  L.cwd = plan.working_dir.empty() ? e.dir + "/work" : plan.working_dir;
  make_dirs(e.dir + "/work");
  L.hostname = plan.hostname.substr(0, 63);
  L.hosts_file = e.dir + "/hosts";
  HostsInput hi{&pod, e.ip, pods_.list(), services_.list(), opts_.cluster_domain};
  rewrite_in_place(L.hosts_file, render_hosts(hi));
  e.run = run;
  make_dirs(e.run_dir());
  make_dirs(e.log_dir + "/" + e.container);
  // The termination message file, read at exit (refresh_process). Its mount
  // point is made on the node's /dev once, like any file mount's.
  const std::string termination_log = e.run_dir() + "/termination-log";
  if (int fd = ::open(termination_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666); fd >= 0) {
    ::fchmod(fd, 0666);  // whatever user the container runs as writes it
    ::close(fd);
  }
  L.mounts.push_back({termination_log, plan.termination_message_path, false});
  L.log_file = e.log_file();
  L.pid_file = e.run_dir() + "/pid.json";
  L.exit_file = e.run_dir() + "/exit.json";
  const std::string launch_path = e.run_dir() + "/launch.json";
  write_json_atomic(launch_path, to_json(L));
  std::string err;
  const pid_t shim = spawn_shim(opts_.self_exe, launch_path, &err);
  if (shim < 0) {
    *reason = "RunContainerError";
    *message = err;
    return false;
  }
  e.shim_pid = shim;
  e.shim_ticks = process_start_ticks(shim);
  e.worker_pid = -1;
  e.running = true;
  e.term_sent = e.kill_sent = false;
  e.state = ContainerState{};
  e.state.kind = ContainerState::Kind::Running;
  e.state.started_at = now_str();
  e.state.container_id = "weft-node://" + e.uid + "/" + std::to_string(run);
  save_record(e);
  spdlog::info("pod {}/{}: started run {} as {} (ip {}, log {})", e.ns, e.name, run, L.argv[0], e.ip, L.log_file);
  return true;
}

bool NodeAgent::start_simulated(const Json& pod, Entry& e, std::string* reason, std::string* message) {
  const Json& cs = pod["spec"]["containers"];
  if (!cs.is_array() || cs.empty()) return *reason = "CreateContainerConfigError", *message = "no containers", false;
  e.container = cs[0].value("name", "");
  e.restart_policy = pod["spec"].value("restartPolicy", "Always");
  const auto ranks = simulated_ranks_of(pod);
  if (auto err = sim_->add(e.uid, e.ip, ranks); !err.empty())
    return *reason = "RunContainerError", *message = "simulated ranks: " + err, false;
  e.run += 1;
  e.running = true;
  e.state = ContainerState{};
  e.state.kind = ContainerState::Kind::Running;
  e.state.started_at = now_str();
  e.state.container_id = "weft-node-sim://" + e.uid + "/" + std::to_string(e.run);
  spdlog::debug("pod {}/{}: simulated run {} ({} ranks served on {})", e.ns, e.name, e.run, ranks.size(), e.ip);
  return true;
}

void NodeAgent::end_simulated(Entry& e, int exit_code, const std::string& reason, const std::string& message) {
  sim_->remove(e.uid);
  e.running = false;
  ContainerState t;
  t.kind = ContainerState::Kind::Terminated;
  t.exit_code = exit_code;
  t.reason = reason;
  t.message = message;
  t.started_at = e.state.started_at;
  t.finished_at = now_str();
  t.container_id = e.state.container_id;
  e.state = t;
}

void NodeAgent::stop_process(Entry& e, int grace_seconds) {
  if (!e.running) return;
  if (sim_) {  // a worker's answer to SIGTERM: it stops and exits 143
    end_simulated(e, 143, "Error", "");
    return;
  }
  if (e.worker_pid < 0)
    if (auto pid = read_json(e.run_dir() + "/pid.json")) e.worker_pid = pid->value("pid", -1);
  const auto now = Clock::now();
  if (!e.term_sent) {
    e.term_sent = true;
    e.kill_at = now + std::chrono::seconds(std::max(0, grace_seconds));
    if (grace_seconds > 0 && e.worker_pid > 0) {
      spdlog::info("pod {}/{}: SIGTERM, SIGKILL in {} s", e.ns, e.name, grace_seconds);
      ::kill(-e.worker_pid, SIGTERM);
      return;
    }
  }
  if (now >= e.kill_at && !e.kill_sent) {
    e.kill_sent = true;
    spdlog::info("pod {}/{}: SIGKILL", e.ns, e.name);
    if (e.worker_pid > 0) ::kill(-e.worker_pid, SIGKILL);
    else if (process_alive(e.shim_pid, e.shim_ticks)) ::kill(e.shim_pid, SIGKILL);  // not started yet
  }
}

bool NodeAgent::finalize(const Json* pod, Entry& e) {
  if (pod) {
    write_status(*pod, e);
    auto res = api_.remove(kube::kPods, e.ns, e.name, kube::Propagation::Background, e.uid, 0);
    // 409 here means the uid precondition failed: that pod is gone already.
    if (!res && !res.error().not_found() && res.error().status != 409) {
      spdlog::warn("pod {}/{}: final delete failed: {}", e.ns, e.name, res.error().message);
      return false;
    }
  }
  {
    std::lock_guard lock(shared_mu_);
    finalized_[e.uid] = Clock::now();
  }
  cleanup(e);
  return true;
}

void NodeAgent::cleanup(Entry& e) {
  std::error_code ec;
  if (sim_) sim_->remove(e.uid);
  fs::remove_all(e.dir, ec);  // emptyDir and ConfigMap copies go with the pod; logs stay
  {
    std::lock_guard lock(shared_mu_);
    ips_.release(e.ip);
  }
  spdlog::info("pod {}/{}: removed", e.ns, e.name);
}

void NodeAgent::write_status(const Json& pod, Entry& e) {
  // The readiness probe, as a kubelet runs it: an HTTP GET to the pod's IP
  // every periodSeconds while the container runs; 2xx/3xx is ready. Not
  // running: not ready, and the next run probes from its start.
  std::optional<ReadinessProbe> probe;
  if (const Json& cs = pod["spec"]["containers"]; cs.is_array() && !cs.empty()) probe = readiness_probe(cs[0]);
  if (!probe) {
    e.probe_ready.reset();
  } else if (e.state.kind != ContainerState::Kind::Running || e.ip.empty()) {
    e.probe_ready = false;
    e.next_probe = Clock::time_point{};
  } else if (Clock::now() >= e.next_probe) {
    const scrape::HttpResponse r =
        scrape::http_get({e.ip, probe->port, probe->path}, std::chrono::seconds(probe->timeout_s));
    const bool ok = r.status >= 200 && r.status < 400;
    if (ok != e.probe_ready.value_or(false))
      spdlog::info("pod {}/{}: readiness probe {} ({})", e.ns, e.name, ok ? "passed" : "failing",
                   r.status ? std::to_string(r.status) : r.error);
    e.probe_ready = ok;
    e.next_probe = Clock::now() + std::chrono::seconds(probe->period_s);
  }
  PodView v;
  v.pod_ip = e.ip;
  v.host_ip = opts_.internal_ip;
  v.start_time = e.start_time;
  v.container = e.container;
  v.image = e.image;
  v.state = e.state;
  v.last_state = e.last_state;
  v.restart_count = e.restart_count;
  v.probe_ready = e.probe_ready;
  Json st = build_pod_status(pod, v, now_str());
  Json sig = status_signature(st);
  if (sig == e.last_status_sig) return;
  // Strategic merge: status.conditions merge by type, so a condition another
  // writer added (the API server's DisruptionTarget on an eviction) stays,
  // even one this agent's cache has not seen yet; a JSON merge patch would
  // replace the whole list.
  auto res = api_.strategic_merge_patch(kube::kPods, e.ns, e.name, {{"status", st}}, true);
  if (!res) {
    if (!res.error().not_found()) spdlog::warn("pod {}/{}: status write failed: {}", e.ns, e.name, res.error().message);
    return;
  }
  e.last_status_sig = sig;
}

void NodeAgent::refresh_files(Entry& e, const Json& pod, bool hosts, bool volumes) {
  if (e.run < 0 || sim_) return;
  if (hosts) {
    HostsInput hi{&pod, e.ip, pods_.list(), services_.list(), opts_.cluster_domain};
    rewrite_in_place(e.dir + "/hosts", render_hosts(hi));
  }
  if (volumes)
    for (const auto& v : e.volumes) {
      if (v.kind != VolumeKind::ConfigMap && v.kind != VolumeKind::Secret) continue;
      const bool secret = v.kind == VolumeKind::Secret;
      auto obj = secret ? secrets_.get(e.ns, v.object) : configmaps_.get(e.ns, v.object);
      if (!obj) continue;  // a deleted object leaves the last content, like the kubelet
      auto f = volume_files(*obj, v.items, secret);
      if (!std::holds_alternative<std::map<std::string, std::string>>(f)) continue;
      const auto& files = std::get<0>(f);
      const size_t d = digest(files);
      if (e.volume_digest[v.name] == d) continue;
      if (auto err = write_atomic_dir(e.dir + "/volumes/" + v.name, files, v.default_mode); err.empty()) {
        e.volume_digest[v.name] = d;
        spdlog::info("pod {}/{}: volume {} updated", e.ns, e.name, v.name);
      }
    }
}

bool NodeAgent::sync_pod(const Json& pod, Entry& e) {
  refresh_process(e);
  if (sim_ && e.running && pod["metadata"].contains("annotations") &&
      pod["metadata"]["annotations"].contains(kSimulateExitAnnotation)) {
    const Json& a = pod["metadata"]["annotations"][kSimulateExitAnnotation];
    int code = 1;
    try {
      code = a.is_string() ? std::stoi(a.get<std::string>()) : 1;
    } catch (const std::exception&) {
    }
    spdlog::info("pod {}/{}: simulated container exits with code {} ({})", e.ns, e.name, code, kSimulateExitAnnotation);
    end_simulated(e, code, code == 0 ? "Completed" : "Error",
                  code == 0 ? "" : "simulated exit " + std::to_string(code) + " (" + kSimulateExitAnnotation + ")");
  }
  if (being_deleted(pod)) {
    if (e.running) stop_process(e, grace_period_seconds(pod));
    return !e.running && timed("its final delete", [&] { return finalize(&pod, e); });
  }
  const auto now = Clock::now();
  const std::string phase = pod.contains("status") ? pod["status"].value("phase", "") : "";
  const bool never_started = e.run < 0 && !e.running;
  const bool ended = !e.running && e.state.kind == ContainerState::Kind::Terminated;
  bool restart = false;
  if (ended) {
    const bool ok = e.state.exit_code == 0;
    restart = e.restart_policy == "Always" || (e.restart_policy == "OnFailure" && !ok);
  }
  if ((never_started && phase != "Succeeded" && phase != "Failed") || (restart && now >= e.retry_at)) {
    if (restart) {
      e.last_state = e.state;
      ++e.restart_count;
    }
    std::string reason, message;
    if (!timed("starting its container", [&] {
          return sim_ ? start_simulated(pod, e, &reason, &message) : start_run(pod, e, &reason, &message);
        })) {
      if (restart) --e.restart_count;  // counted when a run actually starts
      e.state = ContainerState{};
      e.state.reason = reason;
      e.state.message = message;
      e.retry_at = now + std::chrono::seconds(1);
      spdlog::warn("pod {}/{}: cannot start: {}: {}", e.ns, e.name, reason, message);
    } else if (restart) {
      e.retry_at = now + std::chrono::seconds(std::min(10, 1 << std::min(e.restart_count, 4)));
    }
  }
  timed("writing its status", [&] { write_status(pod, e); });
  return false;
}

bool NodeAgent::admission_delayed(const std::string& uid, const std::string& ns_name) {
  if (start_delays_.empty()) return false;
  const auto now = Clock::now();
  auto it = delayed_.find(uid);
  if (it == delayed_.end()) {
    for (const auto& [re, delay] : start_delays_)
      if (std::regex_search(ns_name, re)) {
        spdlog::info("pod {}: admitted in {} s (--start-delay)", ns_name, delay.count());
        it = delayed_.emplace(uid, now + delay).first;
        break;
      }
    if (it == delayed_.end()) return false;
  }
  return now < it->second;  // the periodic sync admits it once due
}

NodeAgent::SyncReport NodeAgent::sync_once() {
  SyncReport report;
  // Shims are our children until we restart; reap them so they are not zombies.
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  const long hosts_gen = cluster_generation_.load(), vol_gen = object_generation_.load();
  const bool hosts_changed = hosts_gen != hosts_generation_seen_, volumes_changed = vol_gen != volume_generation_seen_;
  hosts_generation_seen_ = hosts_gen;
  volume_generation_seen_ = vol_gen;
  const auto now = Clock::now();
  for (auto it = finalized_.begin(); it != finalized_.end();)
    it = now - it->second > std::chrono::minutes(5) ? finalized_.erase(it) : std::next(it);

  std::set<std::string> seen;
  std::mutex report_mu;                 // sync_one may run on several threads (simulated pods)
  std::vector<std::string> done;        // entries to erase once every pod is synced
  auto sync_one = [&](const Json& pod, Entry& e) {
    const std::string who = e.ns + "/" + e.name, uid = e.uid;
    t_longest_step = {"", 0.0};
    const auto pod_t0 = Clock::now();
    const bool finished = sync_pod(pod, e);  // e may not be used once finished
    const double pod_s = std::chrono::duration<double>(Clock::now() - pod_t0).count();
    std::lock_guard lock(report_mu);
    if (finished) done.push_back(uid);
    ++report.pods;
    if (pod_s > report.slowest_s) {
      report.slowest = who;
      report.slowest_s = pod_s;
      report.slowest_doing = t_longest_step.first.empty()
                                 ? std::string("reading its process state")
                                 : fmt::format("{} {:.1f} s", t_longest_step.first, t_longest_step.second);
    }
  };
  std::vector<std::pair<kube::ObjectPtr, Entry*>> batch;
  for (const auto& pod_ptr : pods_.list()) {
    const Json& pod = *pod_ptr;
    const std::string node = pod["spec"].value("nodeName", "");
    if (!my_nodes_.count(node)) continue;
    const std::string uid = meta_str(pod, "uid");
    if (finalized_.count(uid)) continue;
    seen.insert(uid);
    auto it = entries_.find(uid);
    if (it == entries_.end()) {
      const std::string phase = pod.contains("status") ? pod["status"].value("phase", "") : "";
      if (phase == "Succeeded" || phase == "Failed") {
        // Ended before this agent's state was lost: only the final delete is left.
        if (being_deleted(pod)) {
          auto res = api_.remove(kube::kPods, meta_str(pod, "namespace"), meta_str(pod, "name"),
                                 kube::Propagation::Background, uid, 0);
          if (res || res.error().not_found()) finalized_[uid] = now;
        }
        continue;
      }
      if (admission_delayed(uid, meta_str(pod, "namespace") + "/" + meta_str(pod, "name"))) continue;
      delayed_.erase(uid);
      auto e = std::make_unique<Entry>();
      e->uid = uid;
      e->ns = meta_str(pod, "namespace");
      e->name = meta_str(pod, "name");
      e->node = node;
      e->dir = opts_.state_dir + "/pods/" + uid;
      e->log_dir = opts_.state_dir + "/logs/" + e->ns + "_" + e->name + "_" + uid;
      e->start_time = now_str();
      if (pod["spec"].contains("containers") && !pod["spec"]["containers"].empty())
        e->image = pod["spec"]["containers"][0].value("image", "");
      auto ip = ips_.allocate();
      if (!ip) {
        spdlog::error("pod {}/{}: no free pod IP", e->ns, e->name);
        continue;
      }
      e->ip = *ip;
      if (!sim_) {
        make_dirs(e->dir);
        save_record(*e);
      }
      it = entries_.emplace(uid, std::move(e)).first;
    }
    Entry& e = *it->second;
    if (sim_) {
      batch.emplace_back(pod_ptr, &e);  // synced below, several at once
      continue;
    }
    if (e.running && (hosts_changed || volumes_changed))
      timed("refreshing its hosts file and volumes", [&] { refresh_files(e, pod, hosts_changed, volumes_changed); });
    sync_one(pod, e);
  }
  if (!batch.empty()) {
    // Simulated pods: what is left of each is API calls (status writes,
    // final deletes), which a cluster's kubelets make side by side.
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < batch.size(); i = next++) sync_one(*batch[i].first, *batch[i].second);
    };
    std::vector<std::jthread> helpers;
    const size_t threads = std::min(batch.size(), static_cast<size_t>(std::max(1, opts_.simulated_sync_threads)));
    for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
    work();
  }
  for (const auto& uid : done) entries_.erase(uid);
  // Recorded here but no longer in the API (deleted with grace 0, or gone
  // while the agent was down): stop and remove.
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = *it->second;
    if (seen.count(e.uid)) {
      ++it;
      continue;
    }
    refresh_process(e);
    if (e.running) stop_process(e, 2);
    if (e.running) {
      ++it;
      continue;
    }
    cleanup(e);
    it = entries_.erase(it);
  }
  return report;
}

}  // namespace weft::node
