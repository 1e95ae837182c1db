// weft CUDA ops: the CUDA side of ops.h, one function per op with the same
// arguments (ops.cc has already checked shapes and devices; these check the
// CUDA dtype policy and launch on CudaContext::current().compute_stream()).
// All launches are asynchronous to the host except where noted (results
// returned to the host: cross_entropy_forward, sum_squares).
//
// Dtypes on CUDA (docs/cuda.md has the table): activations and parameters are
// bf16 or f32 ("T", the same T within one call); parameter-gradient
// accumulators (dweight_acc, dw_acc), rstd, lse, losses, AdamW state are f32.
// Compiled only when nvcc exists (WEFT_HAVE_CUDA); callers guard with #ifdef.
#pragma once

#include "kernels/ops.h"
#include "tensor/tensor.h"

namespace weft::cuda {

// cuBLASLt, fp32 compute. a and b: both bf16 or both f32; c: f32, or bf16 when
// a is bf16. beta = 1 with an f32 c accumulates weight gradients in place.
void matmul(Tensor c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
            float beta, int64_t M, int64_t N, int64_t K);

void embedding_forward(Tensor out, const Tensor& tokens, const Tensor& weight);
void embedding_backward(Tensor dweight_acc, const Tensor& tokens, const Tensor& dout);

void rmsnorm_forward(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w, float eps);
void rmsnorm_backward(Tensor dx, Tensor dw_acc, const Tensor& dout, const Tensor& x,
                      const Tensor& w, const Tensor& rstd, bool accumulate);

// Positions pos0 .. pos0 + T - 1 (a sequence-parallel rank's slice), or
// positions (packed documents): device I32 [B, T], each in [0, pos0 + T).
void rope_forward(Tensor out, const Tensor& x, const Rope& rope, int64_t pos0, const int32_t* positions = nullptr);
void rope_backward(Tensor dx, const Tensor& dout, const Rope& rope, int64_t pos0,
                   const int32_t* positions = nullptr);

// Head dim D <= 128 (kMaxHeadDim). No [T, T] buffer is ever allocated.
// starts (packed documents): device I32 [B, T], starts[b, t] in [0, t], query
// t sees keys [starts[b, t], t]; such calls run the SIMT kernels (cuDNN's
// graphs here have no per-document mask; mode cudnn is refused).
constexpr int64_t kMaxHeadDim = 128;
void attention_forward(Tensor out, Tensor lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const int32_t* starts = nullptr);
void attention_backward(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const int32_t* starts = nullptr);

void swiglu_forward(Tensor out, const Tensor& gate, const Tensor& up);
void swiglu_backward(Tensor dgate, Tensor dup, const Tensor& dout, const Tensor& gate,
                     const Tensor& up);

// Synchronises (returns the mean loss) and reports out-of-range targets or
// tokens found by any kernel since the last check.
double cross_entropy_forward(Tensor losses, const Tensor& logits, const Tensor& targets);
// The forward's two halves: the losses (queued, no sync) and their mean
// (synchronises, reports bad input).
void cross_entropy_losses(Tensor losses, const Tensor& logits, const Tensor& targets);
double mean_loss(const Tensor& losses);
// dlogits may alias logits: the LM head's logits buffer is reused in place for
// its gradient, so no second [N, V] buffer exists. losses (the forward's, or
// nullptr) saves a read of the logits.
void cross_entropy_backward(Tensor dlogits, const Tensor& logits, const Tensor& targets,
                            float scale, const Tensor* losses);

void fill(Tensor x, float value);
void copy(Tensor dst, const Tensor& src);
// ops::swap_leading_dims (checked there): one 2-D copy per leading index.
void swap_leading_dims(Tensor out, const Tensor& in, int64_t A, int64_t C);
// Any pair of devices, at least one of them CUDA; same dtype and numel
// (ops::transfer checked). Synchronises the compute stream, so host memory on
// either side is safe to read or reuse on return.
void transfer(Tensor dst, const Tensor& src);
void add_acc(Tensor y_acc, const Tensor& x);
void scale(Tensor x, float s);
// f32 <-> bf16 (round to nearest even); dtypes differ (ops::cast copies equal ones).
void cast(Tensor dst, const Tensor& src);
// Deterministic (fixed two-pass order); synchronises.
double sum_squares(const Tensor& x);

// All f32 (master weights are the param).
void adamw_update(Tensor param, const Tensor& grad, Tensor m, Tensor v, const ops::AdamWParams& h);
// The mixed-precision step: master, grad, m, v f32; working (same numel) bf16
// receives the updated master rounded to nearest even, in the same kernel.
void adamw_update_master(Tensor master, const Tensor& grad, Tensor m, Tensor v, Tensor working,
                         const ops::AdamWParams& h);

}  // namespace weft::cuda
