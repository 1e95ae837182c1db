#include "train/memory_estimate.h"

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace weft {
namespace {

// Sizes are computed in double: a config with 10^9 layers must yield a huge
// estimate, not an overflowed one.
// Each part saturates at 2^60 bytes, so their sum cannot overflow either.
int64_t clamp_bytes(double b) {
  constexpr int64_t kMax = int64_t{1} << 60;
  if (!(b > 0)) return 0;
  if (b >= static_cast<double>(kMax)) return kMax;
  return static_cast<int64_t>(b);
}

// The runtime's own resident memory (libraries, OpenMP and OpenBLAS thread
// buffers, the data source, logging) and what kernels and the data path
// allocate besides the model's tensors: a fixed part and a share of the rest.
// Measured at one step on cpu: tiny 14 MiB beyond its tensors' 52 MiB,
// gpt2-124m 79 MiB beyond 5.06 GiB.
constexpr double kOverheadBytes = 32.0 * 1024 * 1024;
constexpr double kOverheadShare = 0.05;

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

int local_world_size(const std::map<std::string, std::string>& env) {
  auto it = env.find(contract::kEnvLocalWorldSize);
  if (it == env.end()) return 1;
  const int n = std::atoi(it->second.c_str());
  return n >= 1 ? n : 1;
}

std::string per_rank(int local) {
  return local > 1 ? " / " + std::to_string(local) + " ranks on this host" : "";
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f TiB", b / (1024.0 * 1024 * 1024 * 1024));
  else if (b >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  return buf;
}

int64_t MemoryEstimate::host_bytes() const {
  if (on_device) return init + overhead;
  return state() + std::max(activations, init) + overhead;
}

std::string MemoryEstimate::describe() const {
  std::string s = format_bytes(total()) + " (weights " + format_bytes(params) + ", gradients " +
                  format_bytes(grads) + ", optimizer " + format_bytes(optimizer) + ", activations " +
                  format_bytes(activations);
  if (init > 0) s += ", initialisation copy " + format_bytes(init);
  s += ", runtime " + format_bytes(overhead);
  if (on_device) s += "; on the GPU " + format_bytes(device_bytes()) + ", on the host " + format_bytes(host_bytes());
  return s + ")";
}

int world_size_from_env(const std::map<std::string, std::string>& env) {
  auto it = env.find(contract::kEnvWorldSize);
  if (it == env.end()) return 1;
  const int n = std::atoi(it->second.c_str());
  return n >= 1 ? n : 1;
}

MemoryEstimate estimate_memory(const WorkerConfig& cfg, int world) {
  const ModelConfig& m = cfg.model;
  const ParallelConfig& p = cfg.parallel;
  const bool cuda = cfg.device == "cuda";
  const bool bf16 = cfg.train.dtype == "bf16" || (cfg.train.dtype == "auto" && cuda);
  const double wt = bf16 ? 2 : 4;            // bytes per working-dtype element
  const double master = bf16 ? 4 : 0;        // AdamW's f32 master copy
  const double C = m.d_model, L = m.n_layers, V = m.vocab_size, F = m.ffn();
  const double Hq = m.n_heads, Hkv = m.n_kv_heads, D = m.n_heads > 0 ? C / Hq : 0;

  // Parameters (model/llama.h's table): norms are C wide, the rest matrices.
  const double norms = 2 * C * L + C;
  const double block_matrices = 2 * C * C + 2 * Hkv * D * C + 3 * C * F;
  const double head = m.tie_embeddings ? 0 : V * C;
  const double matrices = V * C + L * block_matrices + head;
  const double P = norms + matrices;

  MemoryEstimate e;
  e.on_device = cuda;
  const bool isp = p.strategy == "isp";
  int sp = 1;
  if (!isp) {
    // dp and zero hold the whole model and its f32 gradients.
    const double wire = p.bf16_wire && world > 1 ? 2 * P : 0;
    e.params = clamp_bytes(wt * P);
    if (p.strategy == "zero" && world > 1) {
      const double shard = std::ceil(P / world);
      e.grads = clamp_bytes(4 * P + wire + (p.zero.stage == 2 ? 4 * shard : 0));
      e.optimizer = clamp_bytes((8 + master) * shard);
    } else {
      e.grads = clamp_bytes(4 * P + wire);
      e.optimizer = clamp_bytes((8 + master) * P);
    }
  } else {
    // isp: this rank's rows of every matrix (1/wp) and every norm in f32;
    // with wp > 1 a two-slot pool of the largest unit's full weights, its
    // f32 gradient scratch and the reduce-scatter staging (parallel/isp.h).
    sp = std::max(1, p.sp);
    const int wp = std::max(1, p.wp);
    const int wdp = std::max(1, world / (sp * wp));
    const double S = norms + matrices / wp;
    const double slot = wp > 1 ? std::max({V * C, block_matrices, head}) : 0;
    const double wire = p.bf16_wire && wdp > 1 ? 2 * S : 0;
    const bool zero = p.isp.wdp_strategy == "zero" && wdp > 1;
    const double owned = zero ? std::ceil(S / wdp) : S;
    e.params = clamp_bytes(4 * S + 2 * slot * wt);
    e.grads = clamp_bytes(4 * S + 2 * slot * 4 + 2 * (slot / wp) * 4 + wire +
                          (zero && p.zero.stage == 2 ? 4 * owned : 0));
    e.optimizer = clamp_bytes(8 * owned);
  }

  // Activations (Llama::ensure_activations): per position of a micro-batch,
  // every block keeps its input; a block that does not recompute also keeps
  // its norms, q/k/v, attention, residual and SwiGLU tensors (one shared set
  // serves the recomputing blocks); then the head, and backward's scratch.
  const double T = static_cast<double>(cfg.train.seq_len) / sp;
  const double N = static_cast<double>(cfg.train.micro_batch) * T;
  const double kv = Hkv * D;
  const double block =
      N * wt * (5 * C + 2 * kv + 3 * F) + N * 4 * (2 + Hq) + (sp > 1 ? N * wt * (2 * C + 2 * kv) : 0);
  const double recompute = isp ? std::clamp<double>(p.isp.recompute_blocks, 0, L) : 0;
  const double blocks = L * N * C * wt + (L - recompute) * block + (recompute > 0 ? block : 0);
  const double head_acts = N * 4 * 4 + N * wt * (V + 7 * C + 2 * kv + 3 * F) +
                           (sp > 1 ? N * wt * (2 * C + 2 * kv) : 0);
  e.activations = clamp_bytes(blocks + head_acts);

  // Initialisation goes through a host f32 full model (params and gradients)
  // unless the weights are f32 host memory held whole (Trainer::via_full).
  if (isp || bf16 || cuda) e.init = clamp_bytes(8 * P);
  const double held = cuda ? static_cast<double>(e.init)
                           : static_cast<double>(e.state()) + std::max(e.activations, e.init);
  e.overhead = clamp_bytes(kOverheadBytes + kOverheadShare * held);
  return e;
}

std::vector<MemoryLimit> host_memory_limits(const std::map<std::string, std::string>& env) {
  std::vector<MemoryLimit> out;
  const int local = local_world_size(env);
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

void check_memory_fits(const WorkerConfig& cfg, const std::map<std::string, std::string>& env) {
  auto skip = env.find(kEnvSkipMemoryCheck);
  if (skip != env.end() && !skip->second.empty() && skip->second != "0") return;
  const MemoryEstimate e = estimate_memory(cfg, world_size_from_env(env));
  const std::string fix =
      ". Make the model or the micro-batch smaller (model.d_model, model.n_layers, model.vocab_size, "
      "train.micro_batch, train.seq_len) or shard it over more ranks (parallel.strategy zero for the "
      "optimizer state, isp with parallel.wp for the weights, parallel.isp.recompute_blocks for "
      "activations); " +
      std::string(kEnvSkipMemoryCheck) + "=1 skips this check";
  MemoryLimit tightest;
  for (const MemoryLimit& l : host_memory_limits(env))
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
