#include "train/memory_estimate.h"

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace weft {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// A file's first line, trimmed; "" when it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return trim(line);
}

// A byte count, or -1 for "max", empty or garbage.
int64_t parse_limit(const std::string& s) {
  if (s.empty() || s == "max") return -1;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0') return -1;
  if (v >= (1ULL << 60)) return -1;  // cgroup v1 writes "unlimited" as a page-rounded 2^63
  return static_cast<int64_t>(v);
}

// A field of /proc/<self>/status or /proc/meminfo in bytes ("VmRSS:  1234 kB").
int64_t kb_field(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream ss(line.substr(key.size() + 1));
    int64_t kb = -1;
    ss >> kb;
    return kb < 0 ? -1 : kb * 1024;
  }
  return -1;
}

// This process's cgroup paths from /proc/self/cgroup: the v2 one ("0::/x")
// and the v1 memory controller's ("4:memory:/x"); "" when absent.
std::pair<std::string, std::string> cgroup_paths() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, v2, v1;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) v2 = line.substr(3);
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b != std::string::npos && line.substr(a + 1, b - a - 1) == "memory") v1 = line.substr(b + 1);
  }
  return {v2, v1};
}

std::string per_rank(int local) {
  return local > 1 ? " / " + std::to_string(local) + " ranks on this host" : "";
}

}  // namespace

std::vector<MemoryLimit> host_memory_limits(const std::map<std::string, std::string>& env,
                                            const contract::LaunchEnv& launch) {
  std::vector<MemoryLimit> out;
  const int local = launch.local_world;
  const int64_t rss = std::max<int64_t>(0, kb_field("/proc/self/status", "VmRSS"));

  // The cgroup's limit covers every rank of this host (and what they hold now).
  std::string file;
  auto seam = env.find(kEnvCgroupMemoryMax);
  std::vector<std::string> candidates;
  if (seam != env.end() && !seam->second.empty()) {
    candidates = {seam->second};
  } else {
    auto [v2, v1] = cgroup_paths();
    for (std::string d = v2; !d.empty() && d != "/"; d = d.substr(0, d.rfind('/')))
      candidates.push_back("/sys/fs/cgroup" + d + "/memory.max");
    candidates.push_back("/sys/fs/cgroup/memory.max");
    for (std::string d = v1; !d.empty() && d != "/"; d = d.substr(0, d.rfind('/')))
      candidates.push_back("/sys/fs/cgroup/memory" + d + "/memory.limit_in_bytes");
    candidates.push_back("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  }
  // Every ancestor's limit applies too: the smallest one that is set.
  int64_t cg = -1;
  std::string cg_file;
  for (const std::string& c : candidates) {
    const int64_t v = parse_limit(first_line(c));
    if (v >= 0 && (cg < 0 || v < cg)) cg = v, cg_file = c;
  }
  if (cg >= 0)
    out.push_back({cg / local, "the cgroup's memory limit " + format_bytes(cg) + " (" + cg_file + ")" + per_rank(local)});

  // MemAvailable excludes what this process holds already.
  const int64_t avail = kb_field("/proc/meminfo", "MemAvailable");
  if (avail >= 0)
    out.push_back({avail / local + rss, "MemAvailable " + format_bytes(avail) + " in /proc/meminfo" + per_rank(local)});

  // RLIMIT_AS counts address space, resident or not: what is reserved but not
  // resident now (thread stacks, library mappings) is not available either.
  rlimit rl{};
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const int64_t vm = std::max<int64_t>(0, kb_field("/proc/self/status", "VmSize"));
    const int64_t lim = static_cast<int64_t>(rl.rlim_cur);
    out.push_back({std::max<int64_t>(0, lim - std::max<int64_t>(0, vm - rss)),
                   "RLIMIT_AS (ulimit -v) " + format_bytes(lim) + ", of which " + format_bytes(vm) +
                       " is mapped already"});
  }
  return out;
}

void check_memory_fits(const WorkerConfig& cfg, const std::map<std::string, std::string>& env,
                       const contract::LaunchEnv& launch) {
  auto skip = env.find(kEnvSkipMemoryCheck);
  if (skip != env.end() && !skip->second.empty() && skip->second != "0") return;
  const MemoryEstimate e = estimate_memory(cfg, launch.world);
  const std::string fix =
      ". " + memory_fix_hint("") + "; " + std::string(kEnvSkipMemoryCheck) + "=1 skips this check";
  MemoryLimit tightest;
  for (const MemoryLimit& l : host_memory_limits(env, launch))
    if (l.bytes >= 0 && (tightest.bytes < 0 || l.bytes < tightest.bytes)) tightest = l;
  if (tightest.bytes >= 0 && e.host_bytes() > tightest.bytes)
    throw ConfigError("memory: this rank needs about " + e.describe() + " of host memory" +
                      (e.on_device ? " for the host part" : "") + ", but can have " +
                      format_bytes(tightest.bytes) + ": " + tightest.source + fix);
#ifdef WEFT_HAVE_CUDA
  if (e.on_device) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && e.device_bytes() > static_cast<int64_t>(free_b))
      throw ConfigError("memory: this rank needs about " + format_bytes(e.device_bytes()) + " of GPU memory (" +
                        e.describe() + "), but its GPU has " + format_bytes(static_cast<int64_t>(free_b)) +
                        " free of " + format_bytes(static_cast<int64_t>(total_b)) + fix);
  }
#endif
}

}  // namespace weft
