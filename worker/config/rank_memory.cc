#include "config/rank_memory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

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

std::string memory_fix_hint(const std::string& prefix) {
  const std::string& p = prefix;
  return "Make the model or the micro-batch smaller (" + p + "model.d_model, " + p + "model.n_layers, " + p +
         "model.vocab_size, " + p + "train.micro_batch, " + p + "train.seq_len) or shard it over more ranks (" + p +
         "parallel.strategy zero for the optimizer state, isp with " + p + "parallel.wp for the weights, " + p +
         "parallel.isp.recompute_blocks for activations)";
}

int64_t logits_chunk_rows(double chunk_mb, bool cuda, int64_t vocab, int working_bytes) {
  const double mb = chunk_mb > 0 ? chunk_mb : cuda ? kAutoLogitsChunkCudaMb : 0;
  if (mb <= 0 || vocab <= 0 || working_bytes <= 0) return 0;
  const double rows = std::floor(mb * 1048576.0 / (static_cast<double>(vocab) * working_bytes));
  return rows < 1 ? 1 : rows > 4e18 ? static_cast<int64_t>(4e18) : static_cast<int64_t>(rows);
}

MemoryEstimate estimate_memory(const WorkerConfig& cfg, int world) {
  if (cfg.train.dtype == WorkingDtype::Auto)
    throw ConfigError("train.dtype: auto reached the memory estimate unresolved (resolve() makes it f32 or bf16)");
  if (cfg.train.recompute == Recompute::Auto)
    throw ConfigError("train.recompute: auto reached the memory estimate unresolved (resolve() decides it)");
  const ModelConfig& m = cfg.model;
  const ParallelConfig& par = cfg.parallel;
  const bool cuda = cfg.device == ComputeDevice::Cuda;
  const bool bf16 = cfg.train.dtype == WorkingDtype::Bf16;
  const double wt = bf16 ? 2 : 4;            // bytes per working-dtype element
  const double master = bf16 ? 4 : 0;        // AdamW's f32 master copy
  const double C = m.d_model, L = m.n_layers, V = m.vocab_size, F = m.ffn();
  const double Hq = m.n_heads, Hkv = m.n_kv_heads;
  const double D = m.head_dim();
  const double Q = Hq * D;  // the query (and attention output) width, C unless head_dim is set

  // Parameters (worker/model/llama.h's table): norms are C wide, the rest matrices.
  const double norms = 2 * C * L + C;
  const double block_matrices = 2 * Q * C + 2 * Hkv * D * C + 3 * C * F;
  const double head = m.tie_embeddings ? 0 : V * C;
  const double matrices = V * C + L * block_matrices + head;
  const double P = norms + matrices;

  MemoryEstimate e;
  e.on_device = cuda;
  const bool isp = par.strategy == Strategy::Isp;
  int sp = 1;
  if (!isp) {
    // dp and zero hold the whole model and its f32 gradients.
    const double wire = par.bf16_wire && world > 1 ? 2 * P : 0;
    e.params = clamp_bytes(wt * P);
    if (par.strategy == Strategy::Zero && world > 1) {
      const double shard = std::ceil(P / world);
      e.grads = clamp_bytes(4 * P + wire + (par.zero.stage == 2 ? 4 * shard : 0));
      e.optimizer = clamp_bytes((8 + master) * shard);
    } else {
      e.grads = clamp_bytes(4 * P + wire);
      e.optimizer = clamp_bytes((8 + master) * P);
    }
  } else {
    // isp: this rank's rows of every matrix (1/wp) and every norm in the
    // working dtype; with wp > 1 a two-slot pool of the largest unit's full
    // weights, its f32 gradient scratch and the reduce-scatter staging
    // (worker/parallel/isp.h); the optimizer's moments (and master copy) of
    // the shard, or of its owned part with ZeRO over wdp.
    sp = std::max(1, par.sp);
    const int wp = std::max(1, par.wp);
    const int wdp = std::max(1, world / (sp * wp));
    const double S = norms + matrices / wp;
    const double slot = wp > 1 ? std::max({V * C, block_matrices, head}) : 0;
    const double wire = par.bf16_wire && wdp > 1 ? 2 * S : 0;
    const bool zero = par.isp.wdp_strategy == WdpStrategy::Zero && wdp > 1;
    const double owned = zero ? std::ceil(S / wdp) : S;
    e.params = clamp_bytes(wt * S + 2 * slot * wt);
    e.grads = clamp_bytes(4 * S + 2 * slot * 4 + 2 * (slot / wp) * 4 + wire +
                          (zero && par.zero.stage == 2 ? 4 * owned : 0));
    e.optimizer = clamp_bytes((8 + master) * owned);
  }

  // Activations (Llama::ensure_activations): per position of a micro-batch,
  // every block keeps its input; a block that does not recompute also keeps
  // its norms, q/k/v, attention, residual and SwiGLU tensors (one shared set
  // serves the recomputing blocks; with pointwise recompute the norms' outputs
  // and the SwiGLU product are one shared scratch for every block); then the
  // head, and backward's scratch (with a [N, C] sink for the recomputed
  // blocks' output when there are any).
  const double T = static_cast<double>(cfg.train.seq_len) / sp;
  const double N = static_cast<double>(cfg.train.micro_batch) * T;
  const double kv = Hkv * D;
  // Under sequence parallelism each rank holds S positions of H/sp KV heads,
  // or of one head when the KV heads are replicated up to sp; replication
  // adds two [N, sp, D] staging tensors (Llama::kvx_).
  const double kv_split = std::max(Hkv, static_cast<double>(sp)) * D;
  const double kv_stage = sp > 1 && sp > Hkv ? 2 * sp * D : 0;
  const bool pointwise = cfg.train.recompute == Recompute::Pointwise;
  const double block = N * wt * (pointwise ? C + 2 * Q + 2 * kv + 2 * F : 3 * C + 2 * Q + 2 * kv + 3 * F) +
                       N * 4 * (2 + Hq) + (sp > 1 ? N * wt * (2 * Q + 2 * kv_split) : 0);
  const double recompute = isp ? std::clamp<double>(par.isp.recompute_blocks, 0, L) : 0;
  const double blocks = L * N * C * wt + (L - recompute) * block + (recompute > 0 ? block : 0) +
                        (pointwise ? N * wt * (C + F) : 0);
  // The logits: N rows, or a chunk of them (recomputed in backward).
  const double chunk = static_cast<double>(logits_chunk_rows(cfg.train.logits_chunk_mb, cuda, m.vocab_size, bf16 ? 2 : 4));
  const double logit_rows = chunk > 0 ? std::min(N, chunk) : N;
  const double head_acts = N * 4 * 4 + logit_rows * wt * V +
                           N * wt * ((recompute > 0 ? 5 : 4) * C + 2 * Q + 2 * kv + 3 * F) +
                           (sp > 1 ? N * wt * (2 * Q + 2 * kv_split + kv_stage) : 0);
  e.activations = clamp_bytes(blocks + head_acts);

  // Initialisation goes through a host f32 full model (params and gradients)
  // unless the weights are f32 host memory held whole (Trainer::via_full).
  if (isp || bf16 || cuda) e.init = clamp_bytes(8 * P);
  const double held = cuda ? static_cast<double>(e.init)
                           : static_cast<double>(e.state()) + std::max(e.activations, e.init);
  e.overhead = clamp_bytes(kOverheadBytes + kOverheadShare * held);
  return e;
}

}  // namespace weft
