// The one dispatch point per op: check shapes, dtypes and device here, then
// hand raw pointers to kernels/cpu or kernels/cuda. Kernels trust these
// checks, so every message names the op, the operand, and expected vs actual.
//
// Dtypes are the same on both backends (docs/cuda.md): "T" operands are f32 or
// bf16, one T per call; statistics and parameter-gradient accumulators are
// f32. The CPU kernels compute in f32, so bf16 operands are widened into f32
// scratch and bf16 outputs rounded once (cpu::WidenedOperands); an all-f32
// call passes its own pointers.
//
// Row-wise ops (embedding, rmsnorm, swiglu, cross-entropy) accept any leading
// dimensions: [B, T, C] is treated as [B*T, C], so model code need not reshape.
// matmul likewise views each operand as [product of leading dims, last dim].
#include "kernels/ops.h"

#include <atomic>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <string>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cpu/widen.h"
#include "tensor/bf16.h"
#ifdef WEFT_HAVE_CUDA
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cudnn_attention.h"
#endif

namespace weft::ops {
namespace {

std::string where(const char* op, const char* name) { return std::string(op) + ": " + name; }

void expect_shape(const char* op, const char* name, const Tensor& t, const Shape& want) {
  WEFT_CHECK(t.shape == want,
             where(op, name) + " expected shape " + want.str() + ", got " + t.shape.str());
}

void expect_numel(const char* op, const char* name, const Tensor& t, int64_t want,
                  const std::string& why) {
  WEFT_CHECK(t.numel() == want, where(op, name) + " expected " + std::to_string(want) +
                                    " elements (" + why + "), got shape " + t.shape.str());
}

void expect_rank(const char* op, const char* name, const Tensor& t, int rank) {
  WEFT_CHECK(t.rank() == rank, where(op, name) + " expected rank " + std::to_string(rank) +
                                   ", got shape " + t.shape.str());
}

void expect_min_rank(const char* op, const char* name, const Tensor& t, int rank) {
  WEFT_CHECK(t.rank() >= rank, where(op, name) + " expected rank >= " + std::to_string(rank) +
                                   ", got shape " + t.shape.str());
}

void expect_dtype(const char* op, const char* name, const Tensor& t, DType want) {
  WEFT_CHECK(t.dtype == want, where(op, name) + " expected dtype " + dtype_name(want) + ", got " +
                                  dtype_name(t.dtype));
}

// All operands of an op live on one device; returns it.
Device common_device(const char* op, std::initializer_list<const Tensor*> ts) {
  Device dev = (*ts.begin())->device;
  for (const Tensor* t : ts)
    WEFT_CHECK(t->device == dev, std::string(op) + ": operands on different devices (" +
                                     device_name(dev) + " and " + device_name(t->device) + ")");
  return dev;
}

// CUDA branches: the kernel call when weft was built with nvcc, otherwise an
// abort naming the op (a CUDA tensor cannot exist then, but a view could be
// forged). WEFT_CUDA_OP is for void ops, WEFT_CUDA_VALUE for ops that return.
#ifdef WEFT_HAVE_CUDA
#define WEFT_CUDA_OP(name, call) call
#define WEFT_CUDA_VALUE(name, call) call
#else
[[noreturn]] void no_cuda_kernel(const char* op) {
  fatal(__FILE__, __LINE__, std::string(op) + ": CUDA tensor, but weft was built without CUDA");
}
#define WEFT_CUDA_OP(name, call) no_cuda_kernel(name)
#define WEFT_CUDA_VALUE(name, call) (no_cuda_kernel(name), 0.0)
#endif

using Operands = std::initializer_list<std::pair<const char*, const Tensor*>>;

// Operands that must be f32 on every backend (statistics, accumulators).
void expect_f32(const char* op, Operands ts) {
  for (const auto& [name, t] : ts) expect_dtype(op, name, *t, DType::F32);
}

void expect_float(const char* op, const char* name, const Tensor& t) {
  WEFT_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16,
             where(op, name) + " expected dtype f32 or bf16, got " + dtype_name(t.dtype));
}

// The T operands of one call: the first is f32 or bf16, the rest share its dtype.
void expect_same_float(const char* op, Operands ts) {
  const auto& [first_name, first] = *ts.begin();
  expect_float(op, first_name, *first);
  for (const auto& [name, t] : ts)
    WEFT_CHECK(t->dtype == first->dtype,
               where(op, name) + " expected dtype " + dtype_name(first->dtype) + ", got " +
                   dtype_name(t->dtype) + " (the dtype of " + first_name + ")");
}

int64_t last_dim(const Tensor& t) { return t.rank() ? t.dim(-1) : 1; }
int64_t rows_of(const Tensor& t) { return last_dim(t) ? t.numel() / last_dim(t) : 0; }

}  // namespace

// ---- matmul --------------------------------------------------------------

void matmul(Tensor c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
            float beta) {
  const char* op = "matmul";
  expect_min_rank(op, "c", c, 2);
  expect_min_rank(op, "a", a, 2);
  expect_min_rank(op, "b", b, 2);
  // Every operand is viewed as a matrix [rows_of, last_dim]; op(a) is [M, K],
  // op(b) is [K, N]. E.g. dW[N, K] += dY[B, T, N]^T X[B, T, K] needs no reshape.
  const int64_t M = trans_a ? last_dim(a) : rows_of(a), K = trans_a ? rows_of(a) : last_dim(a);
  const int64_t Kb = trans_b ? last_dim(b) : rows_of(b), N = trans_b ? rows_of(b) : last_dim(b);
  WEFT_CHECK(Kb == K, std::string("matmul: inner dimensions differ: op(a) of ") + a.shape.str() +
                          (trans_a ? " (transposed)" : "") + " has K = " + std::to_string(K) +
                          ", op(b) of " + b.shape.str() + (trans_b ? " (transposed)" : "") +
                          " has K = " + std::to_string(Kb));
  WEFT_CHECK(last_dim(c) == N && rows_of(c) == M,
             "matmul: c expected shape [" + std::to_string(M) + ", " + std::to_string(N) +
                 "] (or leading dims flattening to it), got " + c.shape.str());
  if (common_device(op, {&c, &a, &b}) == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::matmul(c, a, b, trans_a, trans_b, alpha, beta, M, N, K));
  expect_same_float(op, {{"a", &a}, {"b", &b}});
  expect_float(op, "c", c);
  WEFT_CHECK(!(a.dtype == DType::F32 && c.dtype == DType::BF16),
             "matmul: c may be bf16 only when a and b are bf16 (got f32 a and b, bf16 c)");
  cpu::WidenedOperands w;
  float* cw = beta == 0.0f ? w.out(c) : w.inout(c);
  cpu::matmul<float>(cw, w.in(a), w.in(b), M, N, K, trans_a, trans_b, alpha, beta);
}

// ---- embedding -----------------------------------------------------------

namespace {
void check_embedding(const char* op, const Tensor& act, const Tensor& tokens,
                     const Tensor& weight) {
  expect_rank(op, "weight", weight, 2);
  expect_dtype(op, "tokens", tokens, DType::I32);
  const int64_t C = weight.dim(1);
  WEFT_CHECK(last_dim(act) == C && rows_of(act) == tokens.numel(),
             where(op, "activations") + " expected shape [" + std::to_string(tokens.numel()) +
                 ", " + std::to_string(C) + "] (tokens " + tokens.shape.str() + ", weight " +
                 weight.shape.str() + "), got " + act.shape.str());
}
}  // namespace

void embedding_forward(Tensor out, const Tensor& tokens, const Tensor& weight) {
  const char* op = "embedding_forward";
  check_embedding(op, out, tokens, weight);
  if (common_device(op, {&out, &tokens, &weight}) == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::embedding_forward(out, tokens, weight));
  expect_same_float(op, {{"weight", &weight}, {"out", &out}});
  if (weight.dtype == DType::BF16)  // a row copy: no widening needed
    return cpu::embedding_forward<uint16_t>(static_cast<uint16_t*>(out.data), tokens.i32(),
                                            static_cast<const uint16_t*>(weight.data),
                                            tokens.numel(), weight.dim(1), weight.dim(0));
  cpu::embedding_forward<float>(out.f32(), tokens.i32(), weight.f32(), tokens.numel(),
                                weight.dim(1), weight.dim(0));
}

void embedding_backward(Tensor dweight_acc, const Tensor& tokens, const Tensor& dout) {
  const char* op = "embedding_backward";
  check_embedding(op, dout, tokens, dweight_acc);
  if (common_device(op, {&dweight_acc, &tokens, &dout}) == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::embedding_backward(dweight_acc, tokens, dout));
  expect_f32(op, {{"dweight_acc", &dweight_acc}});
  expect_float(op, "dout", dout);
  cpu::WidenedOperands w;
  cpu::embedding_backward<float>(dweight_acc.f32(), tokens.i32(), w.in(dout), tokens.numel(),
                                 dweight_acc.dim(1), dweight_acc.dim(0));
}

// ---- RMSNorm -------------------------------------------------------------

namespace {
void check_rmsnorm(const char* op, const Tensor& x, const Tensor& w, const Tensor& rstd) {
  expect_min_rank(op, "x", x, 1);
  expect_shape(op, "w", w, Shape{last_dim(x)});
  expect_numel(op, "rstd", rstd, rows_of(x), "one per row of x " + x.shape.str());
}
}  // namespace

void rmsnorm_forward(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w, float eps) {
  const char* op = "rmsnorm_forward";
  check_rmsnorm(op, x, w, rstd);
  expect_shape(op, "out", out, x.shape);
  if (common_device(op, {&out, &rstd, &x, &w}) == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::rmsnorm_forward(out, rstd, x, w, eps));
  expect_same_float(op, {{"x", &x}, {"w", &w}, {"out", &out}});
  expect_f32(op, {{"rstd", &rstd}});
  cpu::WidenedOperands wd;
  const float* xw = wd.in(x);
  cpu::rmsnorm_forward<float>(wd.out(out), rstd.f32(), xw, wd.in(w), rows_of(x), last_dim(x),
                              eps);
}

void rmsnorm_backward(Tensor dx, Tensor dw_acc, const Tensor& dout, const Tensor& x,
                      const Tensor& w, const Tensor& rstd, bool accumulate) {
  const char* op = "rmsnorm_backward";
  check_rmsnorm(op, x, w, rstd);
  expect_shape(op, "dx", dx, x.shape);
  expect_shape(op, "dout", dout, x.shape);
  expect_shape(op, "dw_acc", dw_acc, w.shape);
  WEFT_CHECK(!accumulate || (dx.data != dout.data && dx.data != x.data),
             std::string(op) + ": accumulating dx must not alias dout or x");
  if (common_device(op, {&dx, &dw_acc, &dout, &x, &w, &rstd}) == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::rmsnorm_backward(dx, dw_acc, dout, x, w, rstd, accumulate));
  expect_same_float(op, {{"x", &x}, {"w", &w}, {"dout", &dout}, {"dx", &dx}});
  if (accumulate) {  // the gradient in dx's dtype, then the sum: as two ops would round
    OwnedTensor tmp(dx.dtype, dx.shape, Device::CPU);
    rmsnorm_backward(tmp.t, dw_acc, dout, x, w, rstd, false);
    return add_acc(dx, tmp);
  }
  expect_f32(op, {{"dw_acc", &dw_acc}, {"rstd", &rstd}});
  cpu::WidenedOperands wd;
  const float *xw = wd.in(x), *doutw = wd.in(dout);
  cpu::rmsnorm_backward<float>(wd.out(dx), dw_acc.f32(), doutw, xw, wd.in(w), rstd.f32(),
                               rows_of(x), last_dim(x));
}

// ---- RoPE ----------------------------------------------------------------

namespace {
void check_rope(const char* op, const Tensor& in) {
  expect_rank(op, "input", in, 4);
  WEFT_CHECK(in.dim(3) % 2 == 0,
             std::string(op) + ": head dim D must be even, got shape " + in.shape.str());
}

// Packed documents' per-row tables (positions, starts): I32 [B, T] on the
// device of the operands they index.
const int32_t* rows_table(const char* op, const char* name, const Tensor* t, const Tensor& like) {
  if (!t) return nullptr;
  WEFT_CHECK(t->dtype == DType::I32 && t->device == like.device,
             std::string(op) + ": " + name + " must be I32 on the operands' device (" +
                 (like.device == Device::CUDA ? "CUDA" : "host") + " memory)");
  expect_shape(op, name, *t, Shape{like.dim(0), like.dim(1)});
  return static_cast<const int32_t*>(t->data);
}
}  // namespace

void rope_forward(Tensor out, const Tensor& x, const Rope& rope, int64_t pos0, const Tensor* positions) {
  const char* op = "rope_forward";
  check_rope(op, x);
  const int32_t* pos = rows_table(op, "positions", positions, x);
  expect_shape(op, "out", out, x.shape);
  WEFT_CHECK(pos0 >= 0, std::string(op) + ": negative first position " + std::to_string(pos0));
  if (common_device(op, {&out, &x}) == Device::CUDA) {
    return WEFT_CUDA_OP(op, cuda::rope_forward(out, x, rope, pos0, pos));
  }
  expect_same_float(op, {{"x", &x}, {"out", &out}});
  cpu::WidenedOperands w;
  const float* xw = w.in(x);
  cpu::rope_forward<float>(w.out(out), xw, x.dim(0), x.dim(1), x.dim(2), x.dim(3), rope, pos0, pos);
}

void rope_backward(Tensor dx, const Tensor& dout, const Rope& rope, int64_t pos0, const Tensor* positions) {
  const char* op = "rope_backward";
  check_rope(op, dout);
  const int32_t* pos = rows_table(op, "positions", positions, dout);
  expect_shape(op, "dx", dx, dout.shape);
  WEFT_CHECK(pos0 >= 0, std::string(op) + ": negative first position " + std::to_string(pos0));
  if (common_device(op, {&dx, &dout}) == Device::CUDA) {
    return WEFT_CUDA_OP(op, cuda::rope_backward(dx, dout, rope, pos0, pos));
  }
  expect_same_float(op, {{"dout", &dout}, {"dx", &dx}});
  cpu::WidenedOperands w;
  const float* doutw = w.in(dout);
  cpu::rope_backward<float>(w.out(dx), doutw, dout.dim(0), dout.dim(1), dout.dim(2), dout.dim(3),
                            rope, pos0, pos);
}

// ---- attention -------------------------------------------------------------

namespace {
// Checks q [B,T,Hq,D], k and v [B,T,Hkv,D] with Hq % Hkv == 0, lse [B,Hq,T].
void check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& lse) {
  expect_rank(op, "q", q, 4);
  expect_rank(op, "k", k, 4);
  const int64_t B = q.dim(0), T = q.dim(1), Hq = q.dim(2), D = q.dim(3), Hkv = k.dim(2);
  expect_shape(op, "k", k, Shape{B, T, Hkv, D});
  expect_shape(op, "v", v, k.shape);
  WEFT_CHECK(Hkv > 0 && Hq % Hkv == 0, std::string(op) + ": query heads " + std::to_string(Hq) +
                                           " (q " + q.shape.str() + ") not a multiple of kv heads " +
                                           std::to_string(Hkv) + " (k " + k.shape.str() + ")");
  expect_shape(op, "lse", lse, Shape{B, Hq, T});
}
}  // namespace

void attention_forward(Tensor out, Tensor lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor* starts) {
  const char* op = "attention_forward";
  check_attention(op, q, k, v, lse);
  const int32_t* st = rows_table(op, "starts", starts, q);
  expect_shape(op, "out", out, q.shape);
  if (common_device(op, {&out, &lse, &q, &k, &v}) == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::attention_forward(out, lse, q, k, v, st));
  expect_same_float(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}});
  expect_f32(op, {{"lse", &lse}});
  cpu::WidenedOperands w;
  const float *qw = w.in(q), *kw = w.in(k), *vw = w.in(v);
  cpu::attention_forward<float>(w.out(out), lse.f32(), qw, kw, vw, q.dim(0), q.dim(1), q.dim(2),
                                k.dim(2), q.dim(3), st);
}

namespace {
std::atomic<AttentionMode> g_attention_mode{AttentionMode::Auto};
}  // namespace

void set_attention_mode(AttentionMode mode) { g_attention_mode.store(mode); }
AttentionMode attention_mode() { return g_attention_mode.load(); }

AttentionKernel attention_kernel(Device device, DType dtype, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                 int64_t D, bool packed) {
  if (device == Device::CPU) return {"cpu", "weft's CPU kernels", ""};
#ifdef WEFT_HAVE_CUDA
  AttentionKernel k;
  if (packed) {
    k.name = "simt";
    k.detail = "packed documents (per-document masks)";
    if (attention_mode() == AttentionMode::Cudnn)
      k.error = "train.attention is cudnn but packed documents run on weft's SIMT attention kernels only";
    return k;
  }
  k.name = cuda::attention_kernel(dtype, B, T, Hq, Hkv, D, &k.detail, &k.error);
  return k;
#else
  (void)dtype, (void)B, (void)T, (void)Hq, (void)Hkv, (void)D, (void)packed;
  return {"cpu", "weft was built without CUDA", ""};
#endif
}

void attention_backward(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor* starts) {
  const char* op = "attention_backward";
  check_attention(op, q, k, v, lse);
  const int32_t* st = rows_table(op, "starts", starts, q);
  expect_shape(op, "out", out, q.shape);
  expect_shape(op, "dout", dout, q.shape);
  expect_shape(op, "dq", dq, q.shape);
  expect_shape(op, "dk", dk, k.shape);
  expect_shape(op, "dv", dv, k.shape);
  if (common_device(op, {&dq, &dk, &dv, &dout, &q, &k, &v, &out, &lse}) == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, st));
  expect_same_float(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"dout", &dout},
                         {"dq", &dq}, {"dk", &dk}, {"dv", &dv}});
  expect_f32(op, {{"lse", &lse}});
  cpu::WidenedOperands w;
  const float *doutw = w.in(dout), *qw = w.in(q), *kw = w.in(k), *vw = w.in(v), *ow = w.in(out);
  cpu::attention_backward<float>(w.out(dq), w.out(dk), w.out(dv), doutw, qw, kw, vw, ow,
                                 lse.f32(), q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), st);
}

// ---- SwiGLU --------------------------------------------------------------

void swiglu_forward(Tensor out, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_forward";
  expect_shape(op, "up", up, gate.shape);
  expect_shape(op, "out", out, gate.shape);
  if (common_device(op, {&out, &gate, &up}) == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::swiglu_forward(out, gate, up));
  expect_same_float(op, {{"gate", &gate}, {"up", &up}, {"out", &out}});
  cpu::WidenedOperands w;
  const float *gw = w.in(gate), *uw = w.in(up);
  cpu::swiglu_forward<float>(w.out(out), gw, uw, gate.numel());
}

void swiglu_backward(Tensor dgate, Tensor dup, const Tensor& dout, const Tensor& gate,
                     const Tensor& up) {
  const char* op = "swiglu_backward";
  expect_shape(op, "up", up, gate.shape);
  expect_shape(op, "dout", dout, gate.shape);
  expect_shape(op, "dgate", dgate, gate.shape);
  expect_shape(op, "dup", dup, gate.shape);
  if (common_device(op, {&dgate, &dup, &dout, &gate, &up}) == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::swiglu_backward(dgate, dup, dout, gate, up));
  expect_same_float(op, {{"gate", &gate}, {"up", &up}, {"dout", &dout}, {"dgate", &dgate},
                         {"dup", &dup}});
  cpu::WidenedOperands w;
  const float *doutw = w.in(dout), *gw = w.in(gate), *uw = w.in(up);
  cpu::swiglu_backward<float>(w.out(dgate), w.out(dup), doutw, gw, uw, gate.numel());
}

// ---- cross-entropy ---------------------------------------------------------

namespace {
void check_cross_entropy(const char* op, const Tensor& logits, const Tensor& targets) {
  expect_min_rank(op, "logits", logits, 2);
  expect_dtype(op, "targets", targets, DType::I32);
  expect_numel(op, "targets", targets, rows_of(logits),
               "one per row of logits " + logits.shape.str());
}

// The forward's checks (cross_entropy_forward, cross_entropy_losses); true
// when the operands are on CUDA.
bool check_cross_entropy_forward(const char* op, const Tensor& losses, const Tensor& logits,
                                 const Tensor& targets) {
  check_cross_entropy(op, logits, targets);
  expect_numel(op, "losses", losses, rows_of(logits),
               "one per row of logits " + logits.shape.str());
  if (common_device(op, {&losses, &logits, &targets}) == Device::CUDA) return true;
  expect_float(op, "logits", logits);
  expect_f32(op, {{"losses", &losses}});
  return false;
}
}  // namespace

double cross_entropy_forward(Tensor losses, const Tensor& logits, const Tensor& targets) {
  const char* op = "cross_entropy_forward";
  if (check_cross_entropy_forward(op, losses, logits, targets))
    return WEFT_CUDA_VALUE(op, cuda::cross_entropy_forward(losses, logits, targets));
  cpu::WidenedOperands w;
  return cpu::cross_entropy_forward<float>(losses.f32(), w.in(logits), targets.i32(),
                                           rows_of(logits), last_dim(logits), op);
}

void cross_entropy_losses(Tensor losses, const Tensor& logits, const Tensor& targets) {
  const char* op = "cross_entropy_losses";
  if (check_cross_entropy_forward(op, losses, logits, targets))
    return WEFT_CUDA_OP(op, cuda::cross_entropy_losses(losses, logits, targets));
  cpu::WidenedOperands w;
  cpu::cross_entropy_forward<float>(losses.f32(), w.in(logits), targets.i32(), rows_of(logits),
                                    last_dim(logits), op);
}

double mean_loss(const Tensor& losses) {
  const char* op = "mean_loss";
  expect_f32(op, {{"losses", &losses}});
  if (losses.device == Device::CUDA) return WEFT_CUDA_VALUE(op, cuda::mean_loss(losses));
  double total = 0.0;
  const float* l = losses.f32();
  for (int64_t i = 0; i < losses.numel(); ++i) total += l[i];
  return losses.numel() ? total / static_cast<double>(losses.numel()) : 0.0;
}

void cross_entropy_backward(Tensor dlogits, const Tensor& logits, const Tensor& targets,
                            float scale, const Tensor* losses) {
  const char* op = "cross_entropy_backward";
  check_cross_entropy(op, logits, targets);
  expect_shape(op, "dlogits", dlogits, logits.shape);
  if (losses) {
    expect_numel(op, "losses", *losses, rows_of(logits), "one per row of logits " + logits.shape.str());
    expect_f32(op, {{"losses", losses}});
  }
  const Device dev = losses ? common_device(op, {&dlogits, &logits, &targets, losses})
                            : common_device(op, {&dlogits, &logits, &targets});
  if (dev == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::cross_entropy_backward(dlogits, logits, targets, scale, losses));
  expect_same_float(op, {{"logits", &logits}, {"dlogits", &dlogits}});
  cpu::WidenedOperands w;
  const float* logitsw = w.in(logits);  // one scratch when dlogits aliases logits
  cpu::cross_entropy_backward<float>(w.out(dlogits), logitsw, targets.i32(), rows_of(logits),
                                     last_dim(logits), scale);
}

// ---- elementwise -----------------------------------------------------------

void fill(Tensor x, float value) {
  if (x.device == Device::CUDA) return WEFT_CUDA_OP("fill", cuda::fill(x, value));
  if (x.dtype == DType::I32)
    return cpu::fill<int32_t>(x.i32(), x.numel(), static_cast<int32_t>(value));
  expect_float("fill", "x", x);
  if (x.dtype == DType::BF16)
    return cpu::fill<uint16_t>(static_cast<uint16_t*>(x.data), x.numel(), f32_to_bf16(value));
  cpu::fill<float>(x.f32(), x.numel(), value);
}

void copy(Tensor dst, const Tensor& src) {
  const char* op = "copy";
  expect_numel(op, "dst", dst, src.numel(), "src is " + src.shape.str());
  WEFT_CHECK(dst.dtype == src.dtype, std::string("copy: dtypes differ: dst ") +
                                         dtype_name(dst.dtype) + ", src " + dtype_name(src.dtype));
  if (common_device(op, {&dst, &src}) == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::copy(dst, src));
  // A copy moves bytes, so any dtype is fine on the CPU.
  cpu::copy<unsigned char>(static_cast<unsigned char*>(dst.data),
                           static_cast<const unsigned char*>(src.data),
                           static_cast<int64_t>(src.nbytes()));
}

void swap_leading_dims(Tensor out, const Tensor& in, int64_t A, int64_t C) {
  const char* op = "swap_leading_dims";
  expect_numel(op, "out", out, in.numel(), "in is " + in.shape.str());
  WEFT_CHECK(out.dtype == in.dtype, std::string("swap_leading_dims: dtypes differ: out ") + dtype_name(out.dtype) +
                                        ", in " + dtype_name(in.dtype));
  WEFT_CHECK(A > 0 && C > 0 && in.numel() % (A * C) == 0,
             "swap_leading_dims: " + in.shape.str() + " is not [" + std::to_string(A) + ", " + std::to_string(C) +
                 ", R]");
  WEFT_CHECK(out.data != in.data || in.numel() == 0, "swap_leading_dims: out aliases in");
  if (common_device(op, {&out, &in}) == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::swap_leading_dims(out, in, A, C));
  const size_t row = in.nbytes() / static_cast<size_t>(A * C);
  const char* src = static_cast<const char*>(in.data);
  char* dst = static_cast<char*>(out.data);
  for (int64_t a = 0; a < A; ++a)
    for (int64_t c = 0; c < C; ++c) std::memcpy(dst + (c * A + a) * row, src + (a * C + c) * row, row);
}

void transfer(Tensor dst, const Tensor& src) {
  const char* op = "transfer";
  expect_numel(op, "dst", dst, src.numel(), "src is " + src.shape.str());
  WEFT_CHECK(dst.dtype == src.dtype, std::string("transfer: dtypes differ: dst ") +
                                         dtype_name(dst.dtype) + ", src " + dtype_name(src.dtype));
  if (dst.device == Device::CUDA || src.device == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::transfer(dst, src));
  cpu::copy<unsigned char>(static_cast<unsigned char*>(dst.data),
                           static_cast<const unsigned char*>(src.data),
                           static_cast<int64_t>(src.nbytes()));
}

void add_acc(Tensor y_acc, const Tensor& x) {
  const char* op = "add_acc";
  expect_numel(op, "y_acc", y_acc, x.numel(), "x is " + x.shape.str());
  if (common_device(op, {&y_acc, &x}) == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::add_acc(y_acc, x));
  expect_float(op, "y_acc", y_acc);
  expect_float(op, "x", x);
  cpu::WidenedOperands w;
  const float* xw = w.in(x);
  cpu::add_acc<float>(w.inout(y_acc), xw, x.numel());
}

void scale(Tensor x, float s) {
  if (x.device == Device::CUDA) return WEFT_CUDA_OP("scale", cuda::scale(x, s));
  expect_float("scale", "x", x);
  cpu::WidenedOperands w;
  cpu::scale<float>(w.inout(x), x.numel(), s);
}

double sum_squares(const Tensor& x) {
  if (x.device == Device::CUDA) return WEFT_CUDA_VALUE("sum_squares", cuda::sum_squares(x));
  expect_float("sum_squares", "x", x);
  cpu::WidenedOperands w;
  return cpu::sum_squares<float>(w.in(x), x.numel());
}

void cast(Tensor dst, const Tensor& src) {
  const char* op = "cast";
  expect_numel(op, "dst", dst, src.numel(), "src is " + src.shape.str());
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"dst", &dst}, {"src", &src}})
    WEFT_CHECK(t->dtype == DType::F32 || t->dtype == DType::BF16,
               where(op, name) + " expected dtype f32 or bf16, got " + dtype_name(t->dtype));
  if (dst.dtype == src.dtype) return copy(dst, src);
  if (common_device(op, {&dst, &src}) == Device::CUDA) return WEFT_CUDA_OP(op, cuda::cast(dst, src));
  if (dst.dtype == DType::BF16)
    cpu::cast_to_bf16(static_cast<uint16_t*>(dst.data), src.f32(), src.numel());
  else
    cpu::cast_from_bf16(dst.f32(), static_cast<const uint16_t*>(src.data), src.numel());
}

// ---- AdamW ---------------------------------------------------------------

void adamw_update(Tensor param, const Tensor& grad, Tensor m, Tensor v, const AdamWParams& h,
                  Tensor master) {
  const char* op = "adamw_update";
  const std::string why = "param is " + param.shape.str();
  expect_numel(op, "grad", grad, param.numel(), why);
  expect_numel(op, "m", m, param.numel(), why);
  expect_numel(op, "v", v, param.numel(), why);
  WEFT_CHECK(h.step >= 1, "adamw_update: step must be >= 1, got " + std::to_string(h.step));
  if (master.data != nullptr) {
    expect_numel(op, "master", master, param.numel(), why);
    expect_dtype(op, "master", master, DType::F32);
    WEFT_CHECK(param.dtype == DType::F32 || param.dtype == DType::BF16,
               where(op, "param") + " (working copy) expected dtype f32 or bf16, got " +
                   dtype_name(param.dtype));
    if (common_device(op, {&param, &grad, &m, &v, &master}) == Device::CUDA) {
      if (param.dtype == DType::BF16)
        return WEFT_CUDA_OP(op, cuda::adamw_update_master(master, grad, m, v, param, h));
      WEFT_CUDA_OP(op, cuda::adamw_update(master, grad, m, v, h));
      return copy(param, master);
    }
    expect_f32(op, {{"master", &master}, {"grad", &grad}, {"m", &m}, {"v", &v}});
    cpu::adamw_update<float>(master.f32(), grad.f32(), m.f32(), v.f32(), master.numel(), h.lr,
                             h.beta1, h.beta2, h.eps, h.weight_decay, h.step, h.grad_scale);
    return cast(param, master);
  }
  if (common_device(op, {&param, &grad, &m, &v}) == Device::CUDA)
    return WEFT_CUDA_OP(op, cuda::adamw_update(param, grad, m, v, h));
  expect_f32(op, {{"param", &param}, {"grad", &grad}, {"m", &m}, {"v", &v}});
  cpu::adamw_update<float>(param.f32(), grad.f32(), m.f32(), v.f32(), param.numel(), h.lr,
                           h.beta1, h.beta2, h.eps, h.weight_decay, h.step, h.grad_scale);
}

int cuda_device_count(std::string* why) {
#ifdef WEFT_HAVE_CUDA
  return cuda::device_count(why);
#else
  if (why) *why = "this build of weft has no CUDA support";
  return 0;
#endif
}

std::string use_cuda_device(int device) {
#ifdef WEFT_HAVE_CUDA
  cuda::install_buffer_allocator();
  return cuda::use_device(device);
#else
  WEFT_CHECK(false, "use_cuda_device(" + std::to_string(device) + "): this build of weft has no CUDA support");
  return "";
#endif
}

CudaMemory cuda_memory() {
#ifdef WEFT_HAVE_CUDA
  const cuda::AllocatorStats a = cuda::allocator_stats();
  return {static_cast<int64_t>(a.bytes_held), static_cast<int64_t>(a.bytes_in_use),
          static_cast<int64_t>(a.peak_bytes_held), static_cast<int64_t>(a.peak_bytes_in_use)};
#else
  return {};
#endif
}

int64_t cuda_device_used() {
#ifdef WEFT_HAVE_CUDA
  return static_cast<int64_t>(cuda::device_used_bytes());
#else
  return 0;
#endif
}

void cuda_release_cached() {
#ifdef WEFT_HAVE_CUDA
  cuda::empty_cache();
  cuda::reset_peak_stats();
#endif
}

void cuda_finish_compute(const char* what) {
#ifdef WEFT_HAVE_CUDA
  cuda::CudaContext::current().sync_and_check(what);
#else
  (void)what;
#endif
}

void* cuda_compute_stream() {
#ifdef WEFT_HAVE_CUDA
  return cuda::compute_stream();
#else
  WEFT_CHECK(false, "cuda_compute_stream: this build of weft has no CUDA support");
  return nullptr;
#endif
}

}  // namespace weft::ops
