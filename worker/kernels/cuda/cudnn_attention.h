// Causal GQA attention through cuDNN's fused flash attention (forward and
// backward), the fast path of ops::attention_* on a GPU; weft's SIMT kernels
// (attention.cu) are the fallback.
//
// cuDNN is not linked: the header-only cudnn-frontend (third_party/, pinned)
// is compiled with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING and libcudnn.so.9 is
// opened with dlopen on first use, like cuBLASLt, so a build with cuDNN's
// headers runs where cuDNN is missing (the SIMT kernels run there). Graphs are
// built once per (device, dtype, B, T, Hq, Hkv, D) and cached.
//
// What runs is chosen per call: cuDNN when the mode allows it
// (ops::set_attention_mode: the config's train.attention, auto | cudnn |
// simt, passed in by the trainer), cuDNN is loaded, the dtype is bf16 and
// cuDNN supports the shape (it builds the graphs to find out); else the SIMT
// kernels. Mode cudnn aborts instead of falling back.
#pragma once

#include <string>

#include "kernels/ops.h"
#include "tensor/tensor.h"

namespace weft::cuda {

// The process-wide mode of kernels/ops.h, for later calls.
using ops::AttentionMode;
using ops::attention_mode;
using ops::set_attention_mode;

// "cuDNN 9.19.0 (libcudnn.so.9)" when cuDNN is loaded, else empty with the
// reason in `why`. Loads it on the first call.
std::string cudnn_version(std::string* why = nullptr);

// Whether attention of this shape runs through cuDNN in the current mode:
// "cudnn" or "simt", with the reason in `detail` (the cuDNN version, or why
// not). Builds and caches both graphs for the shape. Where the mode is cudnn
// and cuDNN cannot run the shape, `error` says so (and the ops would abort):
// callers turn it into a clear exit.
std::string attention_kernel(DType dtype, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                             std::string* detail, std::string* error);

// cuDNN's kernels on the compute stream. Return false, with nothing launched,
// when cuDNN cannot run the call (not loaded, f32, unsupported shape); the
// caller then runs the SIMT kernels. lse is cuDNN's softmax statistic, the
// natural-log log-sum-exp of each scaled score row, the same quantity the
// SIMT kernels write, so either backward can follow either forward.
bool cudnn_attention_forward(Tensor out, Tensor lse, const Tensor& q, const Tensor& k, const Tensor& v);
bool cudnn_attention_backward(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout, const Tensor& q,
                              const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse);

// The SIMT kernels alone (attention.cu), whatever the mode; starts as in
// cuda_ops.h's attention_forward.
void simt_attention_forward(Tensor out, Tensor lse, const Tensor& q, const Tensor& k, const Tensor& v,
                            const int32_t* starts = nullptr);
void simt_attention_backward(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout, const Tensor& q,
                             const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                             const int32_t* starts = nullptr);

}  // namespace weft::cuda
