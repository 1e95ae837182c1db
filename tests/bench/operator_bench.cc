// weft-operator benchmark against a real kube-apiserver (tests/kube testenv):
//  1. time from `kubectl apply` to all pods created, for 8/64/256-rank jobs,
//     and with --running (a cluster with a node agent) to all pods Running;
//  2. API calls the operator spent per job (by verb, from its own metrics);
//  3. reconcile latency percentiles (operator histogram);
//  4. operator RSS and CPU with N idle TrainingJobs (1 rank each);
//  5. with --observe-seconds (a cluster whose node agent simulates pods,
//     weft-node --simulate-pods: tests/bench/operator_scale.sh): the scrape
//     poller's passes over the running gang (operator histogram), status.progress
//     filled, operator CPU and RSS, the API server's own request counts by
//     verb and resource (its /metrics, apiserver_request_total) for the launch,
//     and with --restart a gang restart after one pod is deleted.
// Prints a Markdown table and writes JSON to --out. Run through
// tests/bench/operator_bench.sh (a bare control plane) or
// tests/bench/cluster_scale.sh (the local cluster, pods really start).
//
// Pods are observed through one watch, not by listing: a list of 256 pods
// every few ms would load the API server the benchmark is measuring.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <set>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "kube/kube_api.h"
#include "kube/kube_config.h"
#include "support/net.h"

using namespace std::chrono_literals;
using weft::kube::Json;
using Clock = std::chrono::steady_clock;
using weft::testing::free_port;

namespace {

// series name (with labels) -> value
std::map<std::string, double> scrape(int port) {
  std::map<std::string, double> out;
  std::istringstream in(weft::testing::http_get(port, "/metrics").body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

std::map<std::string, double> api_calls(const std::map<std::string, double>& m) {
  std::map<std::string, double> out;
  const std::string prefix = "weft_operator_api_requests{verb=\"";
  for (const auto& [k, v] : m)
    if (k.rfind(prefix, 0) == 0) out[k.substr(prefix.size(), k.size() - prefix.size() - 2)] = v;
  return out;
}

// Percentile from a cumulative Prometheus histogram, linear within a bucket.
double hist_quantile(const std::map<std::string, double>& m, const std::string& name, double q) {
  std::vector<std::pair<double, double>> buckets;  // le, cumulative count
  const std::string prefix = name + "_bucket{le=\"";
  for (const auto& [k, v] : m)
    if (k.rfind(prefix, 0) == 0) {
      std::string le = k.substr(prefix.size(), k.size() - prefix.size() - 2);
      buckets.emplace_back(le == "+Inf" ? INFINITY : std::stod(le), v);
    }
  std::sort(buckets.begin(), buckets.end());
  if (buckets.empty() || buckets.back().second == 0) return NAN;
  double target = q * buckets.back().second, prev_le = 0, prev_c = 0;
  for (auto [le, c] : buckets) {
    if (c >= target) {
      if (std::isinf(le)) return prev_le;
      return prev_le + (le - prev_le) * (c == prev_c ? 0 : (target - prev_c) / (c - prev_c));
    }
    prev_le = le;
    prev_c = c;
  }
  return prev_le;
}

// A labelled histogram's buckets (le -> cumulative count) from a scrape.
std::vector<std::pair<double, double>> buckets_of(const std::map<std::string, double>& m, const std::string& prefix) {
  std::vector<std::pair<double, double>> out;
  for (const auto& [k, v] : m)
    if (k.rfind(prefix, 0) == 0) {
      const auto at = k.find("le=\"");
      if (at == std::string::npos) continue;
      const std::string le = k.substr(at + 4, k.find('"', at + 4) - at - 4);
      out.emplace_back(le == "+Inf" ? INFINITY : std::stod(le), v);
    }
  std::sort(out.begin(), out.end());
  return out;
}

// The q-quantile of the observations between two scrapes (linear in a
// bucket); q = 1: the upper bound of the largest one's bucket.
double delta_quantile(const std::vector<std::pair<double, double>>& b0, const std::vector<std::pair<double, double>>& b1,
                      double q) {
  if (b1.empty() || b0.size() != b1.size()) return NAN;
  const double total = b1.back().second - b0.back().second;
  if (total <= 0) return NAN;
  double prev_le = 0, prev_c = 0;
  for (size_t i = 0; i < b1.size(); ++i) {
    const double le = b1[i].first, c = b1[i].second - b0[i].second;
    if (c >= q * total) {
      if (q >= 1) return le;
      if (std::isinf(le)) return prev_le;
      return prev_le + (le - prev_le) * (c == prev_c ? 0 : (q * total - prev_c) / (c - prev_c));
    }
    prev_le = le;
    prev_c = c;
  }
  return prev_le;
}

struct ProcStats {
  double rss_mb = 0, cpu_s = 0;
};
ProcStats proc_stats(int pid) {
  ProcStats s;
  std::ifstream st("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(st, line))
    if (line.rfind("VmRSS:", 0) == 0) s.rss_mb = std::stod(line.substr(6)) / 1024.0;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(stat)), {});
  std::istringstream rest(all.substr(all.rfind(')') + 2));
  std::vector<std::string> f((std::istream_iterator<std::string>(rest)), {});
  s.cpu_s = (std::stod(f[11]) + std::stod(f[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
  return s;
}

Json job(const std::string& name, int replicas, int procs_per_pod = 1, bool stragglers = false) {
  Json j = {{"apiVersion", "weft.dev/v1alpha1"},
            {"kind", "TrainingJob"},
            {"metadata", {{"name", name}}},
            {"spec", {{"replicas", replicas}, {"image", "ghcr.io/weft-dev/weft:bench"}, {"worker", {{"preset", "tiny"}}}}}};
  if (procs_per_pod > 1) j["spec"]["procsPerPod"] = procs_per_pod;
  if (stragglers) j["spec"]["stragglers"] = Json::object();
  // A deleted pod restarts the gang at once (not counted against maxRestarts).
  j["spec"]["restartPolicy"] = {{"backoffSeconds", 1}};
  return j;
}

// The API server's own count of requests (apiserver_request_total) by
// "verb resource[/subresource]", every client together.
std::map<std::string, double> apiserver_requests(const std::string& kubeconfig) {
  std::map<std::string, double> out;
  FILE* f = ::popen(("kubectl --kubeconfig " + kubeconfig + " get --raw /metrics 2>/dev/null").c_str(), "r");
  if (!f) return out;
  char buf[8192];
  std::string line;
  auto label = [](const std::string& l, const std::string& key) -> std::string {
    for (const std::string pre : {"{", ","}) {
      const auto at = l.find(pre + key + "=\"");
      if (at == std::string::npos) continue;
      const auto start = at + pre.size() + key.size() + 2;
      return l.substr(start, l.find('"', start) - start);
    }
    return "";
  };
  while (std::fgets(buf, sizeof buf, f)) {
    line = buf;
    if (line.rfind("apiserver_request_total{", 0) != 0) continue;
    // What a job's launch and restart touch; the rest (another namespace's
    // deletion by the namespace controller, leases) is left out.
    static const std::set<std::string> kResources = {"pods", "trainingjobs", "events", "services", "configmaps",
                                                      "secrets", "networkpolicies", "endpoints", "endpointslices"};
    if (!kResources.count(label(line, "resource"))) continue;
    std::string key = label(line, "verb") + " " + label(line, "resource");
    const std::string sub = label(line, "subresource");
    if (!sub.empty()) key += "/" + sub;
    out[key] += std::stod(line.substr(line.rfind(' ') + 1));
  }
  ::pclose(f);
  return out;
}

// after - before, only what changed, as "verb resource=n ..." and JSON.
std::string diff_counts(const std::map<std::string, double>& before, const std::map<std::string, double>& after,
                        Json* out, double* total, const std::string& only = "") {
  std::string s;
  *total = 0;
  for (const auto& [k, v] : after) {
    const double d = v - (before.count(k) ? before.at(k) : 0);
    if (d <= 0 || (!only.empty() && k.find(only) == std::string::npos)) continue;
    (*out)[k] = d;
    *total += d;
    s += k + "=" + std::to_string(static_cast<long>(d)) + "; ";
  }
  return s;
}

size_t count_pods(weft::kube::KubeApi& api, const std::string& ns, const std::string& selector) {
  weft::kube::ListOptions o;
  o.label_selector = selector;
  auto r = api.list(weft::kube::kPods, ns, o);
  return r ? r->items.size() : 0;
}

// Pods of the namespace as one watch sees them: which exist and which are
// Running, per job label.
class PodWatch {
 public:
  PodWatch(weft::kube::KubeApi& api, const std::string& ns)
      : thread_([this, &api, ns](std::stop_token stop) {
          std::string rv;
          while (!stop.stop_requested()) {
            weft::kube::WatchOptions o;
            o.resource_version = rv;
            auto r = api.watch(weft::kube::kPods, ns, o, [&](const weft::kube::WatchEvent& e) {
              const Json& meta = e.object["metadata"];
              if (meta.contains("resourceVersion")) rv = meta["resourceVersion"].get<std::string>();
              if (e.type == "BOOKMARK") return;
              const std::string job = meta.contains("labels") ? meta["labels"].value("weft.dev/job", "") : "";
              const std::string attempt =
                  job + "@" + (meta.contains("labels") ? meta["labels"].value("weft.dev/attempt", "") : "");
              const std::string name = meta.value("name", "");
              const bool running = e.object.contains("status") && e.object["status"].value("phase", "") == "Running";
              std::lock_guard lock(mu_);
              for (const std::string& key : {job, attempt}) {
                if (e.type == "DELETED") {
                  created_[key].erase(name);
                  running_[key].erase(name);
                } else {
                  created_[key].insert(name);
                  if (running) running_[key].insert(name);
                  else running_[key].erase(name);
                }
              }
              cv_.notify_all();
            }, stop);
            if (!r) rv.clear();
          }
        }) {}
  ~PodWatch() {
    thread_.request_stop();
    cv_.notify_all();
  }
  // Blocks until `n` pods of `job` (or of "job@attempt") exist (running=false) or run.
  void wait_for(const std::string& job, size_t n, bool running) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return (running ? running_ : created_)[job].size() >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::set<std::string>> created_, running_;
  std::jthread thread_;
};

// The API server's own floor for a gang: the same `n` pods created straight
// from this client, 32 at a time, unthrottled. Copies of `pod` (one of the
// operator's) under new names, without the job's labels and owner, bound to
// a node that does not exist so nothing schedules or runs them.
double direct_create_seconds(weft::kube::KubeApi& api, const std::string& ns, const Json& pod, int n,
                             const std::string& tag) {
  Json tpl = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"spec", pod["spec"]}};
  tpl["spec"]["nodeName"] = "bench-floor-no-such-node";
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  std::atomic<int> next{0};
  for (int t = 0; t < 32; ++t)
    threads.emplace_back([&] {
      for (int i = next++; i < n; i = next++) {
        Json p = tpl;
        p["metadata"] = {{"name", tag + "-" + std::to_string(i)}, {"labels", {{"weft.dev/bench-floor", tag}}}};
        if (!api.create(weft::kube::kPods, ns, p)) std::cerr << "direct create " << i << " failed\n";
      }
    });
  for (auto& t : threads) t.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weft-operator benchmark against a real API server"};
  std::string kubeconfig, operator_bin, out = "operator_bench.json";
  std::vector<int> sizes = {8, 64, 256};
  int idle_jobs = 500, idle_seconds = 30;
  bool running = false, stragglers = false, restart = false, direct = true;
  int procs_per_pod = 1, observe_seconds = 0;
  app.add_option("--procs-per-pod", procs_per_pod, "spec.procsPerPod of the jobs (--sizes counts pods)");
  app.add_flag("--stragglers", stragglers, "spec.stragglers on: the poller reads every pod's rank 0 every 2 s");
  app.add_option("--observe-seconds", observe_seconds,
                 "once Running: wait for status.progress, then watch the scrape poller and the operator this long "
                 "(needs ranks that serve metrics: weft-node --simulate-pods)");
  app.add_flag("--restart", restart, "once observed: delete pod 1 and time the gang's restart");
  app.add_flag("!--no-direct", direct, "skip creating the same pods straight from one client");
  app.add_option("--kubeconfig", kubeconfig)->required();
  app.add_option("--operator-bin", operator_bin)->required();
  app.add_option("--sizes", sizes);
  app.add_option("--idle-jobs", idle_jobs);
  app.add_option("--idle-seconds", idle_seconds);
  app.add_option("--out", out);
  app.add_flag("--running", running, "also time apply -> all pods Running (needs a node agent)");
  std::vector<std::string> extra;
  app.add_option("--operator-arg", extra, "extra flag for weft-operator (repeatable)");
  CLI11_PARSE(app, argc, argv);

  weft::kube::KubeApi api(weft::kube::load_kubeconfig(kubeconfig), {500, 1000});
  const std::string ns = "bench-" + std::to_string(::getpid());
  api.create(weft::kube::kNamespaces, "", {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
  for (int i = 0; i < 200 && !api.get({"", "v1", "serviceaccounts", "ServiceAccount"}, ns, "default"); ++i)
    std::this_thread::sleep_for(50ms);

  const int mport = free_port();
  std::vector<std::string> args = {operator_bin, "--kubeconfig", kubeconfig, "--namespace", ns, "--metrics-port",
                                   std::to_string(mport), "--health-port", "0", "--bind-address", "127.0.0.1"};
  if (std::find(extra.begin(), extra.end(), "--log-level") == extra.end()) args.insert(args.end(), {"--log-level", "warn"});
  args.insert(args.end(), extra.begin(), extra.end());
  int pid = ::fork();
  if (pid == 0) {
    std::vector<char*> av;
    for (auto& a : args) av.push_back(a.data());
    av.push_back(nullptr);
    ::execv(av[0], av.data());
    _exit(127);
  }
  while (scrape(mport).empty()) std::this_thread::sleep_for(50ms);
  // Informers synced, and the 2 s metrics refresh has seen the initial list+watch calls.
  std::this_thread::sleep_for(2500ms);

  PodWatch watch(api, ns);
  weft::kube::KubeApi fast_api(weft::kube::load_kubeconfig(kubeconfig), {100000, 100000});
  Json result = {{"sizes", Json::array()}};
  std::cout << "| ranks | apply -> all pods created (s) | of which kubectl apply (s) | same pods created directly (s) |"
            << (running ? " apply -> all pods Running (s) |" : "")
            << " operator API calls | calls by verb |\n|---|---|---|---|" << (running ? "---|" : "") << "---|---|\n";
  for (int n : sizes) {
    const std::string name = "bench-" + std::to_string(n);
    const std::string file = "/tmp/" + ns + "-" + name + ".json";
    std::ofstream(file) << job(name, n, procs_per_pod, stragglers).dump();
    auto before = api_calls(scrape(mport));
    const auto server_before = observe_seconds > 0 ? apiserver_requests(kubeconfig) : std::map<std::string, double>{};
    const ProcStats launch0 = proc_stats(pid);
    auto t0 = Clock::now();
    if (std::system(("kubectl --kubeconfig " + kubeconfig + " apply -n " + ns + " -f " + file + " >/dev/null").c_str()) != 0) {
      std::cerr << "kubectl apply failed for " << file << "\n";
      return 1;
    }
    const double kubectl_secs = std::chrono::duration<double>(Clock::now() - t0).count();
    watch.wait_for(name, n, false);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    double run_secs = NAN;
    if (running) {
      watch.wait_for(name, n, true);
      run_secs = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    const ProcStats launch1 = proc_stats(pid);
    std::this_thread::sleep_for(3s);  // let status writes and events settle
    auto after = api_calls(scrape(mport));
    Json extra = Json::object();
    if (observe_seconds > 0) {
      const auto server_after = apiserver_requests(kubeconfig);
      Json by = Json::object();
      double total = 0;
      const std::string pods_line = diff_counts(server_before, server_after, &by, &total);
      std::printf("\nlaunch of %d pods x %d ranks: operator CPU %.2f s from apply to all Running (%.1f s), RSS %.1f MiB\n",
                  n, procs_per_pod, launch1.cpu_s - launch0.cpu_s, run_secs, launch1.rss_mb);
      std::printf("API server requests during the launch (every client, apiserver_request_total): %.0f: %s\n", total,
                  pods_line.c_str());
      extra["launch_operator_cpu_s"] = launch1.cpu_s - launch0.cpu_s;
      extra["apiserver_requests_launch"] = by;
      // status.progress from the simulated ranks' metrics.
      const auto p0 = Clock::now();
      long step = -1;
      while (Clock::now() - p0 < 120s) {
        auto got = api.get(weft::kube::kTrainingJobs, ns, name);
        if (got && (*got).contains("status") && (*got)["status"].contains("progress"))
          step = (*got)["status"]["progress"].value("step", -1L);
        if (step > 0) break;
        std::this_thread::sleep_for(250ms);
      }
      const double progress_secs = std::chrono::duration<double>(Clock::now() - t0).count();
      std::printf("status.progress.step %ld, %.2f s after apply\n", step, progress_secs);
      extra["progress_step"] = step;
      extra["apply_to_progress_seconds"] = progress_secs;
      const std::string pfx = "weft_operator_scrape_pass_seconds_bucket{scope=\"every_rank\"";
      const std::string cnt = "weft_operator_scrape_pass_seconds_count{scope=\"every_rank\"}";
      const std::string sum = "weft_operator_scrape_pass_seconds_sum{scope=\"every_rank\"}";
      const std::string scr = "weft_operator_rank_scrapes_total{scope=\"every_rank\"}";
      auto m0 = scrape(mport);
      const ProcStats o0 = proc_stats(pid);
      std::this_thread::sleep_for(std::chrono::seconds(observe_seconds));
      auto m1 = scrape(mport);
      const ProcStats o1 = proc_stats(pid);
      const double passes = m1[cnt] - m0[cnt], secs = m1[sum] - m0[sum], scrapes = m1[scr] - m0[scr];
      const auto b0 = buckets_of(m0, pfx), b1 = buckets_of(m1, pfx);
      const double p50 = delta_quantile(b0, b1, 0.5), p90 = delta_quantile(b0, b1, 0.9), worst = delta_quantile(b0, b1, 1);
      std::printf("over %d s: %.0f every-rank poller passes (%.0f rank scrapes), pass time mean %.3f s, p50 %.3f s, "
                  "p90 %.3f s, largest <= %.3f s; operator CPU %.2f cores, RSS %.1f MiB\n",
                  observe_seconds, passes, scrapes, passes > 0 ? secs / passes : NAN, p50, p90, worst,
                  (o1.cpu_s - o0.cpu_s) / observe_seconds, o1.rss_mb);
      extra["observe"] = {{"seconds", observe_seconds}, {"passes", passes}, {"rank_scrapes", scrapes},
                          {"pass_mean_s", passes > 0 ? secs / passes : -1}, {"pass_p50_s", p50}, {"pass_p90_s", p90},
                          {"pass_max_le_s", worst}, {"cpu_cores", (o1.cpu_s - o0.cpu_s) / observe_seconds},
                          {"rss_mib", o1.rss_mb}};
      if (restart) {
        weft::kube::ListOptions o;
        o.label_selector = "weft.dev/job=" + name;
        o.limit = 1;
        auto one = api.list(weft::kube::kPods, ns, o);
        const int attempt = one && !one->items.empty()
                                ? std::stoi(one->items[0]["metadata"]["labels"].value("weft.dev/attempt", "0"))
                                : 0;
        std::this_thread::sleep_for(2s);
        const auto ops0 = api_calls(scrape(mport));
        const auto srv0 = apiserver_requests(kubeconfig);
        const ProcStats r0 = proc_stats(pid);
        const auto rt0 = Clock::now();
        std::system(("kubectl --kubeconfig " + kubeconfig + " delete pod -n " + ns + " " + name +
                     "-1 --wait=false >/dev/null").c_str());
        const std::string next = name + "@" + std::to_string(attempt + 1);
        watch.wait_for(next, n, false);
        const double re_created = std::chrono::duration<double>(Clock::now() - rt0).count();
        watch.wait_for(next, n, true);
        const double re_running = std::chrono::duration<double>(Clock::now() - rt0).count();
        const ProcStats r1 = proc_stats(pid);
        std::this_thread::sleep_for(3s);
        Json ops_by = Json::object(), srv_by = Json::object();
        double ops_total = 0, srv_total = 0;
        const std::string ops_line = diff_counts(ops0, api_calls(scrape(mport)), &ops_by, &ops_total);
        const std::string srv_line = diff_counts(srv0, apiserver_requests(kubeconfig), &srv_by, &srv_total);
        std::printf("gang restart (pod %s-1 deleted): attempt %d's %d pods created %.2f s and Running %.2f s after the "
                    "delete; operator CPU %.2f s\n  operator API calls %.0f: %s\n  API server requests (every "
                    "client) %.0f: %s\n",
                    name.c_str(), attempt + 1, n, re_created, re_running, r1.cpu_s - r0.cpu_s, ops_total,
                    ops_line.c_str(), srv_total, srv_line.c_str());
        extra["restart"] = {{"created_s", re_created}, {"running_s", re_running}, {"operator_cpu_s", r1.cpu_s - r0.cpu_s},
                            {"operator_calls", ops_by}, {"apiserver_requests", srv_by}};
      }
      std::fflush(stdout);
    }
    double floor_secs = NAN;
    if (direct) {
      weft::kube::ListOptions o;
      o.label_selector = "weft.dev/job=" + name;
      o.limit = 1;
      auto one = api.list(weft::kube::kPods, ns, o);
      if (one && !one->items.empty())
        floor_secs = direct_create_seconds(fast_api, ns, one->items[0], n, "floor-" + std::to_string(n));
    }
    double total = 0;
    std::string by;
    Json verbs = Json::object();
    for (auto& [verb, v] : after) {
      double d = v - (before.count(verb) ? before[verb] : 0);
      if (d <= 0) continue;
      total += d;
      verbs[verb] = d;
      by += verb + "=" + std::to_string(static_cast<long>(d)) + " ";
    }
    if (running)
      std::printf("| %d | %.2f | %.2f | %.2f | %.2f | %.0f | %s|\n", n, secs, kubectl_secs, floor_secs, run_secs, total,
                  by.c_str());
    else
      std::printf("| %d | %.2f | %.2f | %.2f | %.0f | %s|\n", n, secs, kubectl_secs, floor_secs, total, by.c_str());
    std::fflush(stdout);
    result["sizes"].push_back({{"ranks", n}, {"apply_to_pods_seconds", secs}, {"kubectl_apply_seconds", kubectl_secs},
                               {"direct_create_seconds", floor_secs},
                               {"api_calls", total}, {"by_verb", verbs}});
    if (running) result["sizes"].back()["apply_to_running_seconds"] = run_secs;
    result["sizes"].back().update(extra);
    std::remove(file.c_str());
  }

  auto finish = [&] {
    std::ofstream(out) << result.dump(2) << "\n";
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
    api.remove(weft::kube::kNamespaces, "", ns);
    return 0;
  };
  if (idle_jobs <= 0) return finish();

  // Idle load: many small jobs, then a quiet window.
  auto t0 = Clock::now();
  for (int i = 0; i < idle_jobs; ++i) api.create(weft::kube::kTrainingJobs, ns, job("idle-" + std::to_string(i), 1));
  while (count_pods(api, ns, "weft.dev/job") < static_cast<size_t>(idle_jobs + [&] {
           int s = 0;
           for (int n : sizes) s += n;
           return s;
         }()))
    std::this_thread::sleep_for(500ms);
  double converge = std::chrono::duration<double>(Clock::now() - t0).count();
  std::this_thread::sleep_for(5s);
  auto idle_before = api_calls(scrape(mport));
  ProcStats p0 = proc_stats(pid);
  std::this_thread::sleep_for(std::chrono::seconds(idle_seconds));
  ProcStats p1 = proc_stats(pid);
  auto idle_after = api_calls(scrape(mport));
  double idle_calls = 0;
  for (auto& [verb, v] : idle_after) idle_calls += v - (idle_before.count(verb) ? idle_before[verb] : 0);
  auto m = scrape(mport);
  const double p50 = hist_quantile(m, "weft_operator_reconcile_seconds", 0.5);
  const double p90 = hist_quantile(m, "weft_operator_reconcile_seconds", 0.9);
  const double p99 = hist_quantile(m, "weft_operator_reconcile_seconds", 0.99);
  const double reconciles = m["weft_operator_reconcile_seconds_count"];
  std::printf("\n%d idle 1-rank jobs created and converged in %.1f s (%.1f jobs/s)\n", idle_jobs, converge,
              idle_jobs / converge);
  std::printf("idle over %d s: RSS %.1f MiB, CPU %.3f cores, %.0f API calls\n", idle_seconds, p1.rss_mb,
              (p1.cpu_s - p0.cpu_s) / idle_seconds, idle_calls);
  std::printf("reconcile latency over %.0f reconciles: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms\n", reconciles, p50 * 1e3,
              p90 * 1e3, p99 * 1e3);
  result["idle"] = {{"jobs", idle_jobs}, {"converge_seconds", converge}, {"rss_mib", p1.rss_mb},
                    {"cpu_cores", (p1.cpu_s - p0.cpu_s) / idle_seconds}, {"api_calls_in_window", idle_calls},
                    {"window_seconds", idle_seconds}};
  result["reconcile_seconds"] = {{"count", reconciles}, {"p50", p50}, {"p90", p90}, {"p99", p99}};
  return finish();
}
