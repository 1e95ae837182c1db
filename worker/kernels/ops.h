// weft ops: the one dispatch point between model code and kernels.
// Every op checks shapes and dtypes, then calls kernels/cpu or kernels/cuda by the
// device of its tensors (all operands must live on one device).
//
// Conventions (the same on every backend):
//   - activations are row-major; N = B*T rows of width C unless stated;
//   - "out" / "d*" outputs named *_acc are ACCUMULATED (+=), all others are
//     overwritten (=). Parameter gradients are always accumulated, so gradient
//     accumulation over micro-batches is free;
//   - attention layouts are [B, T, H, D] (the natural output of x @ W^T).
//   - dtypes are the same on every backend (docs/cuda.md, "Dtypes"): activations
//     and weights f32 or bf16, one dtype per call; statistics (rstd, lse,
//     losses) and parameter-gradient accumulators f32. The CPU computes bf16
//     ops in f32 and rounds each bf16 output once.
#pragma once

#include <string>

#include "kernels/rope_freqs.h"
#include "tensor/tensor.h"

namespace weft::ops {

// ---- matmul --------------------------------------------------------------
// c[M,N] = alpha * op(a) @ op(b) + beta * c, op(x) = x or x^T.
// a is [M,K] (or [K,M] if trans_a), b is [K,N] (or [N,K] if trans_b).
void matmul(Tensor c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
            float alpha = 1.0f, float beta = 0.0f);

// ---- embedding -----------------------------------------------------------
// out[N,C] = weight[tokens[n], :]; tokens i32 [N] in [0, V).
void embedding_forward(Tensor out, const Tensor& tokens, const Tensor& weight);
// dweight_acc[tokens[n], :] += dout[n, :]
void embedding_backward(Tensor dweight_acc, const Tensor& tokens, const Tensor& dout);

// ---- RMSNorm -------------------------------------------------------------
// out = x * rstd * w, rstd[n] = 1/sqrt(mean(x[n]^2) + eps). Saves rstd [N].
void rmsnorm_forward(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w, float eps);
// dx = d/dx (overwritten; may alias dout or x), dw_acc += d/dw. With
// accumulate, dx += d/dx (a residual stream's gradient sum in one pass; dx
// must then alias neither dout nor x).
void rmsnorm_backward(Tensor dx, Tensor dw_acc, const Tensor& dout, const Tensor& x,
                      const Tensor& w, const Tensor& rstd, bool accumulate = false);

// ---- RoPE (Hugging Face rotate_half convention) ----------------------------
// x is [B, T, H, D], D even. Position of row t is pos0 + t (pos0 = 0: every
// sequence starts at 0; a sequence-parallel rank holding a slice passes the
// slice's first global position).
// inv_freq[i] = rope_inv_freq(rope, i, D) (theta^(-2i/D) unscaled, or with
// Llama 3's wavelength bands: kernels/rope_freqs.h; a plain number is an
// unscaled theta), angle = t * inv_freq[i mod D/2],
// out = x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[D/2:], x[:D/2]).
// out may alias x. positions (packed documents), I32 [B, T] on x's device:
// the position of each row instead of pos0 + t, each in [0, pos0 + T) (the
// values are not checked: the CUDA kernel's angle table holds pos0 + T rows).
void rope_forward(Tensor out, const Tensor& x, const Rope& rope, int64_t pos0 = 0,
                  const Tensor* positions = nullptr);
// dx = R(-angle) dout; dx may alias dout.
void rope_backward(Tensor dx, const Tensor& dout, const Rope& rope, int64_t pos0 = 0,
                   const Tensor* positions = nullptr);

// ---- causal attention with grouped KV heads -------------------------------
// q [B,T,Hq,D], k,v [B,T,Hkv,D], Hq % Hkv == 0 (query head h uses kv head h/(Hq/Hkv)).
// out [B,T,Hq,D] = softmax(q k^T / sqrt(D) + causal mask) v.
// lse [B,Hq,T] saves the log-sum-exp of each scaled score row for backward.
// starts (packed documents), I32 [B, T] on q's device: query t sees keys
// [starts[b, t], t] only, the positions of its own document (on CUDA, weft's
// SIMT kernels: cuDNN's graphs here have no per-document mask). Each start
// must be in [0, t]; the values are not checked (Llama::forward checks its
// table once on the host; a CUDA kernel given one outside reads out of bounds).
void attention_forward(Tensor out, Tensor lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor* starts = nullptr);
// dq, dk, dv overwritten; starts as in forward.
void attention_backward(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor* starts = nullptr);
// Which CUDA kernels run attention (the config's train.attention, which the
// trainer passes in here before its first step; WEFT_ATTENTION overrides the
// config, not the kernels): Auto (the default) runs cuDNN's fused flash
// attention where it can run the call and weft's SIMT kernels otherwise;
// Cudnn runs cuDNN or aborts, never falling back; Simt runs weft's kernels.
// The CPU has one attention and ignores it. Process-wide.
enum class AttentionMode { Auto, Cudnn, Simt };
void set_attention_mode(AttentionMode mode);
AttentionMode attention_mode();

// Which kernels run attention of this shape and dtype on `device`: "cpu",
// "cudnn" (cuDNN's fused flash attention, bf16 on a GPU where libcudnn.so.9
// loads) or "simt" (weft's CUDA kernels: f32, no cuDNN, an unsupported shape,
// packed documents, or mode Simt), with the reason in `detail`. On a GPU this builds and caches
// cuDNN's graphs for the shape, so the first step does not pay for it.
// `error` is set where the mode asks for what cannot run (Cudnn where cuDNN
// cannot run it).
struct AttentionKernel {
  std::string name, detail, error;
};
AttentionKernel attention_kernel(Device device, DType dtype, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                 int64_t D, bool packed = false);

// ---- SwiGLU --------------------------------------------------------------
// out = silu(gate) * up, all [N, F].
void swiglu_forward(Tensor out, const Tensor& gate, const Tensor& up);
// dgate, dup overwritten.
void swiglu_backward(Tensor dgate, Tensor dup, const Tensor& dout, const Tensor& gate,
                     const Tensor& up);

// ---- cross-entropy ---------------------------------------------------------
// logits [N,V], targets i32 [N]. losses[n] = logsumexp(logits[n]) - logits[n, t].
// Returns the mean loss over N (computed in double).
double cross_entropy_forward(Tensor losses, const Tensor& logits, const Tensor& targets);
// The losses alone, without the mean: on CUDA no host sync, so logits
// computed in chunks cost one sync per step (mean_loss's), not one per
// chunk; a bad target is reported by that sync. The CPU checks at once.
void cross_entropy_losses(Tensor losses, const Tensor& logits, const Tensor& targets);
// Mean of f32 losses [N], summed in double in a fixed order (on CUDA the same
// sum cross_entropy_forward returns; synchronises and reports bad input).
double mean_loss(const Tensor& losses);
// dlogits = (softmax(logits) - onehot(targets)) * scale (overwritten; may alias logits).
// scale = dL/dloss_n, e.g. 1/(N * grad_accum_steps) for a mean loss.
// losses, when given, are cross_entropy_forward's for these very logits: the
// CUDA kernel then takes each row's logsumexp from them and reads the logits
// once instead of twice (the CPU kernel recomputes it either way).
void cross_entropy_backward(Tensor dlogits, const Tensor& logits, const Tensor& targets,
                            float scale, const Tensor* losses = nullptr);

// ---- elementwise helpers ---------------------------------------------------
void fill(Tensor x, float value);
void copy(Tensor dst, const Tensor& src);       // same numel, dtype and device
// out[c, a, :] = in[a, c, :] with in viewed as [A, C, R] (R = numel / (A C))
// and out as [C, A, R]: the two leading dimensions swapped, rows of R
// elements moved as bytes (any dtype). The Ulysses all-to-all packs and
// unpacks its chunks with it. Same numel, dtype and device; no aliasing.
void swap_leading_dims(Tensor out, const Tensor& in, int64_t A, int64_t C);
void add_acc(Tensor y_acc, const Tensor& x);    // y += x
void scale(Tensor x, float s);                  // x *= s
double sum_squares(const Tensor& x);            // sum x^2 in double
// dst = src converted between f32 and bf16 (round to nearest even), or copied
// when the dtypes agree; same numel, same device. dst must not alias src
// unless the dtypes agree.
void cast(Tensor dst, const Tensor& src);

// dst = src between any two devices (host <-> GPU, GPU -> GPU, host -> host);
// same dtype and numel. Ordered on CudaContext::current().compute_stream()
// after the kernels already launched there, and synchronous: when it returns,
// dst holds the data and src may be reused (a CPU -> CPU transfer is a copy).
void transfer(Tensor dst, const Tensor& src);

// ---- AdamW (decoupled weight decay), one contiguous range -----------------
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd * p); t >= 1.
// grad_scale multiplies the gradient as it is read (gradient clipping's
// coefficient, fused: the same f32 product as scaling the gradient first).
struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay;
  int64_t step;
  float grad_scale = 1.0f;
};
// grad, m, v f32. Without `master`, param (f32) is updated in place. With a
// master copy (f32, same numel; mixed precision, like llm.c's
// master_params_memory) the update runs on master and param, the working copy
// in f32 or bf16, receives the updated master rounded to its dtype.
void adamw_update(Tensor param, const Tensor& grad, Tensor m, Tensor v, const AdamWParams& h,
                  Tensor master = {});

// ---- devices ----------------------------------------------------------------
// GPUs this process may use (CUDA_VISIBLE_DEVICES applies). 0, with the reason
// in `why`, without a driver, without a device, or in a build without CUDA.
int cuda_device_count(std::string* why = nullptr);
// Makes GPU `device` (< cuda_device_count()) current for the calling thread,
// where later CUDA tensors, streams and NCCL communicators are created, and
// routes CUDA buffers through the caching allocator (call it before any CUDA
// buffer exists); returns the device's name.
std::string use_cuda_device(int device);
// The caching allocator's bytes obtained from the driver and handed out, now
// and at their highs (all 0 in a build without CUDA).
struct CudaMemory {
  int64_t held = 0, in_use = 0;
  int64_t peak_held = 0, peak_in_use = 0;
};
CudaMemory cuda_memory();
// The current GPU's used bytes by anything (the CUDA context, libraries'
// workspaces, weft's allocator, other processes); 0 without CUDA.
int64_t cuda_device_used();
// Returns the caching allocator's free blocks to the driver (after a device
// synchronize) and restarts its peaks from there; a no-op without CUDA.
void cuda_release_cached();
// Blocks until the current GPU's compute stream has run everything issued so
// far, and reports bad input a kernel found since the last check (the end of
// a training step: its time is then the device's, not the launches'). A no-op
// without CUDA.
void cuda_finish_compute(const char* what);
// The calling thread's current GPU's compute stream (a cudaStream_t), on
// which every op runs; what communicators order their collectives against.
void* cuda_compute_stream();

}  // namespace weft::ops
