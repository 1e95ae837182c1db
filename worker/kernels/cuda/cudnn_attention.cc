#include "kernels/cuda/cudnn_attention.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/context.h"

#ifdef WEFT_HAVE_CUDNN
#include <dlfcn.h>

#include <cmath>
#include <cudnn_frontend.h>

// The frontend's dynamic loading reads cuDNN's symbols from this handle.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}
#endif

namespace weft::cuda {

#ifdef WEFT_HAVE_CUDNN

namespace {

namespace fe = cudnn_frontend;

// Tensor uids of both graphs.
enum : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct Loaded {
  bool ok = false;
  std::string version;  // "cuDNN 9.19.0 (libcudnn.so.9)"
  std::string why;      // when not ok
};

Loaded load_cudnn() {
  Loaded l;
  const char* names[] = {"libcudnn.so.9", "/usr/local/cuda/lib64/libcudnn.so.9"};
  void* h = nullptr;
  std::string errors;
  for (const char* n : names) {
    h = dlopen(n, RTLD_NOW | RTLD_LOCAL);
    if (h) {
      l.version = n;
      break;
    }
    const char* e = dlerror();
    errors += std::string(errors.empty() ? "" : "; ") + (e ? e : n);
  }
  if (!h) {
    l.why = "cuDNN not found (" + errors + ")";
    return l;
  }
  fe::cudnn_dlhandle = h;
  try {
    const int64_t v = fe::detail::get_backend_version();
    if (v < 90000) {
      l.why = "cuDNN " + std::to_string(v) + " is older than 9.0";
      return l;
    }
    l.version = "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                std::to_string(v % 100) + " (" + l.version + ")";
  } catch (const std::exception& e) {
    l.why = std::string("cuDNN did not load: ") + e.what();
    return l;
  }
  l.ok = true;
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load_cudnn();
  return l;
}

// One cuDNN handle per device, on that device's compute stream.
cudnnHandle_t handle_for(int device) {
  static std::mutex mutex;
  static std::map<int, cudnnHandle_t> handles;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  WEFT_CHECK(fe::detail::create_handle(&h) == CUDNN_STATUS_SUCCESS, "cudnnCreate failed");
  WEFT_CHECK(fe::detail::set_stream(h, CudaContext::current().compute_stream()) == CUDNN_STATUS_SUCCESS,
             "cudnnSetStream failed");
  handles.emplace(device, h);
  return h;
}

struct Key {
  int device;
  DType dtype;
  int64_t B, T, Hq, Hkv, D;
  bool operator<(const Key& o) const {
    return std::tie(device, dtype, B, T, Hq, Hkv, D) < std::tie(o.device, o.dtype, o.B, o.T, o.Hq, o.Hkv, o.D);
  }
};

struct Graphs {
  bool ok = false;
  std::string why;  // when not ok
  std::shared_ptr<fe::graph::Graph> fwd, bwd;
  int64_t fwd_workspace = 0, bwd_workspace = 0;
  bool deterministic = false;  // the backward plan's dQ has no atomics
};

// weft's [B, T, H, D] as cuDNN's (b, h, s, d) dims with strides.
fe::graph::Tensor_attributes bthd(const char* name, int64_t uid, int64_t B, int64_t T, int64_t H, int64_t D) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({B, H, T, D})
      .set_stride({T * H * D, D, H * D, 1});
}

fe::graph::Tensor_attributes stats_attrs(int64_t B, int64_t T, int64_t Hq) {  // lse [B, Hq, T]
  return fe::graph::Tensor_attributes()
      .set_name("stats")
      .set_uid(kStats)
      .set_dim({B, Hq, T, 1})
      .set_stride({Hq * T, T, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

std::shared_ptr<fe::graph::Graph> new_graph(DType dtype) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(dtype == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// Builds a graph's plans; the error message when cuDNN cannot run it.
std::string build(fe::graph::Graph& g, cudnnHandle_t h, int64_t& workspace) {
  auto st = g.validate();
  if (st.is_good()) st = g.build_operation_graph(h);
  if (st.is_good()) st = g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
  if (st.is_good()) st = g.check_support(h);
  if (st.is_good()) st = g.build_plans(h, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE);
  if (st.is_good()) st = g.get_workspace_size(workspace);
  return st.is_good() ? std::string() : st.get_message();
}

Graphs build_graphs(const Key& k) {
  Graphs gs;
  const cudnnHandle_t h = handle_for(k.device);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(k.D)));
  try {
    auto f = new_graph(k.dtype);
    auto q = f->tensor(bthd("q", kQ, k.B, k.T, k.Hq, k.D));
    auto kk = f->tensor(bthd("k", kK, k.B, k.T, k.Hkv, k.D));
    auto v = f->tensor(bthd("v", kV, k.B, k.T, k.Hkv, k.D));
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("attention_forward")
                    .set_generate_stats(true)
                    .set_attn_scale(scale)
                    .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                    .set_diagonal_band_right_bound(0);
    auto [o, stats] = f->sdpa(q, kk, v, opts);
    o->set_output(true).set_uid(kO).set_dim({k.B, k.Hq, k.T, k.D}).set_stride({k.T * k.Hq * k.D, k.D, k.Hq * k.D, 1});
    stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT)
        .set_dim({k.B, k.Hq, k.T, 1}).set_stride({k.Hq * k.T, k.T, 1, 1});
    if (std::string e = build(*f, h, gs.fwd_workspace); !e.empty()) {
      gs.why = "forward: " + e;
      return gs;
    }

    // Deterministic backward first (no atomics in dQ, as the SIMT kernels);
    // where cuDNN has no such plan for the shape, its default one.
    std::string bwd_error;
    for (bool deterministic : {true, false}) {
      auto b = new_graph(k.dtype);
      auto bq = b->tensor(bthd("q", kQ, k.B, k.T, k.Hq, k.D));
      auto bk = b->tensor(bthd("k", kK, k.B, k.T, k.Hkv, k.D));
      auto bv = b->tensor(bthd("v", kV, k.B, k.T, k.Hkv, k.D));
      auto bo = b->tensor(bthd("o", kO, k.B, k.T, k.Hq, k.D));
      auto bdo = b->tensor(bthd("dout", kDO, k.B, k.T, k.Hq, k.D));
      auto bstats = b->tensor(stats_attrs(k.B, k.T, k.Hq));
      auto bopts = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_attn_scale(scale)
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0)
                       .set_deterministic_algorithm(deterministic);
      auto [dq, dk, dv] = b->sdpa_backward(bq, bk, bv, bo, bdo, bstats, bopts);
      const std::vector<int64_t> qstride{k.T * k.Hq * k.D, k.D, k.Hq * k.D, 1};
      const std::vector<int64_t> kstride{k.T * k.Hkv * k.D, k.D, k.Hkv * k.D, 1};
      dq->set_output(true).set_uid(kDQ).set_dim({k.B, k.Hq, k.T, k.D}).set_stride(qstride);
      dk->set_output(true).set_uid(kDK).set_dim({k.B, k.Hkv, k.T, k.D}).set_stride(kstride);
      dv->set_output(true).set_uid(kDV).set_dim({k.B, k.Hkv, k.T, k.D}).set_stride(kstride);
      bwd_error = build(*b, h, gs.bwd_workspace);
      if (bwd_error.empty()) {
        gs.bwd = std::move(b);
        gs.deterministic = deterministic;
        break;
      }
    }
    if (!gs.bwd) {
      gs.why = "backward: " + bwd_error;
      return gs;
    }
    gs.fwd = std::move(f);
    gs.ok = true;
  } catch (const std::exception& e) {
    gs.why = std::string("cuDNN: ") + e.what();
  }
  return gs;
}

// The cached graphs of a shape, or null when cuDNN cannot run it (`why`).
const Graphs* graphs_for(DType dtype, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                         std::string* why) {
  std::string reason;
  if (dtype != DType::BF16) {
    reason = std::string("cuDNN's fused attention takes bf16, not ") + dtype_name(dtype);
  } else if (!loaded().ok) {
    reason = loaded().why;
  }
  if (!reason.empty()) {
    if (why) *why = reason;
    return nullptr;
  }
  static std::mutex mutex;
  static std::map<Key, Graphs> cache;
  std::lock_guard<std::mutex> lock(mutex);
  const Key key{CudaContext::current().device(), dtype, B, T, Hq, Hkv, D};
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, build_graphs(key)).first;
  if (!it->second.ok) {
    if (why) *why = it->second.why;
    return nullptr;
  }
  return &it->second;
}

// Runs a graph with a workspace from the allocator, freed after the launch
// (blocks are reused in compute-stream order).
void execute(fe::graph::Graph& g, int64_t workspace_bytes,
             std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*>& pack, const char* op) {
  const cudnnHandle_t h = handle_for(CudaContext::current().device());
  void* ws = workspace_bytes > 0 ? device_alloc(static_cast<size_t>(workspace_bytes)) : nullptr;
  auto st = g.execute(h, pack, ws);
  if (ws) device_free(ws);
  WEFT_CHECK(st.is_good(), std::string(op) + ": cuDNN execute failed: " + st.get_message());
}

bool use_cudnn_for(const char* op, const Tensor& q, const Tensor& k, const Graphs** out) {
  const AttentionMode mode = attention_mode();
  if (mode == AttentionMode::Simt) return false;
  std::string why;
  *out = graphs_for(q.dtype, q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), &why);
  WEFT_CHECK(*out != nullptr || mode != AttentionMode::Cudnn,
             std::string(op) + ": train.attention is cudnn but cuDNN cannot run q " + q.shape.str() + ": " + why);
  return *out != nullptr;
}

}  // namespace

std::string cudnn_version(std::string* why) {
  if (!loaded().ok && why) *why = loaded().why;
  return loaded().ok ? loaded().version : std::string();
}

std::string attention_kernel(DType dtype, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                             std::string* detail, std::string* error) {
  std::string why;
  if (attention_mode() == AttentionMode::Simt) {
    if (detail) *detail = "train.attention simt";
    return "simt";
  }
  if (const Graphs* gs = graphs_for(dtype, B, T, Hq, Hkv, D, &why)) {
    if (detail) {
      *detail = loaded().version + ", fused flash attention, " +
                (gs->deterministic ? "deterministic" : "non-deterministic") + " backward";
    }
    return "cudnn";
  }
  if (attention_mode() == AttentionMode::Cudnn)
    *error = "train.attention is cudnn but cuDNN cannot run this attention: " + why;
  if (detail) *detail = why;
  return "simt";
}

bool cudnn_attention_forward(Tensor out, Tensor lse, const Tensor& q, const Tensor& k, const Tensor& v) {
  const Graphs* gs = nullptr;
  if (!use_cudnn_for("attention_forward", q, k, &gs)) return false;
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack = {
      {kQ, q.data}, {kK, k.data}, {kV, v.data}, {kO, out.data}, {kStats, lse.data}};
  execute(*gs->fwd, gs->fwd_workspace, pack, "attention_forward");
  return true;
}

bool cudnn_attention_backward(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout, const Tensor& q,
                              const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) {
  const Graphs* gs = nullptr;
  if (!use_cudnn_for("attention_backward", q, k, &gs)) return false;
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack = {
      {kQ, q.data},       {kK, k.data},        {kV, v.data},   {kO, out.data},  {kStats, lse.data},
      {kDO, dout.data},   {kDQ, dq.data},      {kDK, dk.data}, {kDV, dv.data}};
  execute(*gs->bwd, gs->bwd_workspace, pack, "attention_backward");
  return true;
}

#else  // built without cuDNN's headers: the SIMT kernels always run

std::string cudnn_version(std::string* why) {
  if (why) *why = "weft was built without cuDNN's headers";
  return {};
}

std::string attention_kernel(DType, int64_t, int64_t, int64_t, int64_t, int64_t, std::string* detail,
                             std::string* error) {
  if (attention_mode() == AttentionMode::Cudnn) *error = "train.attention is cudnn but weft was built without cuDNN";
  if (detail) *detail = attention_mode() == AttentionMode::Simt ? "train.attention simt" : "weft was built without cuDNN's headers";
  return "simt";
}

bool cudnn_attention_forward(Tensor, Tensor, const Tensor&, const Tensor&, const Tensor&) {
  WEFT_CHECK(attention_mode() != AttentionMode::Cudnn, "train.attention is cudnn but weft was built without cuDNN");
  return false;
}

bool cudnn_attention_backward(Tensor, Tensor, Tensor, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const Tensor&) {
  WEFT_CHECK(attention_mode() != AttentionMode::Cudnn, "train.attention is cudnn but weft was built without cuDNN");
  return false;
}

#endif

}  // namespace weft::cuda
