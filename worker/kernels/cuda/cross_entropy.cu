// Cross-entropy over the LM head's logits, fp32 math whatever the logits'
// dtype. One block per row.
//
// The logits are the largest tensor of a step ([B T, V], 1.6 GB in bf16 for
// gpt2-124m at micro-batch 16), so both kernels are written to pass over them
// as few times as possible, with 16-byte loads where the row allows:
//  - forward: one read, an online max and sum of exp (each thread keeps its
//    running (max, sum) and rescales the sum when the max grows; the block
//    then combines the pairs), loss = max + log(sum) - logit[target];
//  - backward: one read and one write when the forward's losses are passed
//    (logsumexp = loss + logit[target]), else a read for the statistics first.
// In the write pass each thread reads element j just before writing it, and
// logit[target] is read by every thread before any writes, so dlogits may
// alias logits: the memory saving of fusing the softmax into the loss is that
// no second [N, V] buffer ever exists.
// Bad targets set kTargetOutOfRange (no abort inside a kernel); the forward
// synchronises and reports them.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace weft::cuda {
namespace {

constexpr int kThreads = 512;

// (m, s) <- the pair for the union of both sets: s = sum of exp(l - m).
__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both empty
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

// Row max and sum(exp(l - max)) in one read. kVec: the row is read in
// 16-byte packs (V a multiple of the pack, row start 16-byte aligned).
template <typename T, bool kVec>
__device__ void row_stats(const T* l, int64_t V, float* mx, float* sum) {
  __shared__ float red_m[32], red_s[32];
  float m = -INFINITY, s = 0.0f;
  if constexpr (kVec) {
    constexpr int P = kPack<T>;
    for (int64_t i = threadIdx.x; i < V / P; i += blockDim.x) {
      float v[P];
      load_pack(l, i, v);
      float pm = v[0];
      for (int k = 1; k < P; ++k) pm = fmaxf(pm, v[k]);
      if (pm > m) {
        s *= expf(m - pm);
        m = pm;
      }
      for (int k = 0; k < P; ++k) s += expf(v[k] - m);
    }
  } else {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) combine(m, s, load_f32(l, j), 1.0f);
  }
  for (int o = 16; o > 0; o >>= 1)
    combine(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    red_m[warp] = m;
    red_s[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    const bool has = lane < static_cast<int>(blockDim.x >> 5);
    m = has ? red_m[lane] : -INFINITY;
    s = has ? red_s[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
      combine(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    if (lane == 0) {
      red_m[0] = m;
      red_s[0] = s;
    }
  }
  __syncthreads();
  *mx = red_m[0];
  *sum = red_s[0];
}

template <typename T, bool kVec>
__global__ void ce_fwd_kernel(float* losses, const T* logits, const int32_t* targets, int64_t V,
                              uint32_t* error_word) {
  const int64_t row = blockIdx.x;
  const T* l = logits + row * V;
  float mx, s;
  row_stats<T, kVec>(l, V, &mx, &s);
  if (threadIdx.x == 0) {
    const int32_t t = targets[row];
    if (t < 0 || t >= V) {
      atomicOr(error_word, kTargetOutOfRange);
      losses[row] = NAN;
    } else {
      losses[row] = mx + logf(s) - load_f32(l, t);
    }
  }
}

// losses == nullptr: the row's statistics are computed here (one more read).
template <typename T, bool kVec>
__global__ void ce_bwd_kernel(T* dlogits, const T* logits, const int32_t* targets,
                              const float* losses, int64_t V, float scale, uint32_t* error_word) {
  const int64_t row = blockIdx.x;
  const T* l = logits + row * V;
  T* d = dlogits + row * V;
  const int32_t t = targets[row];
  if (t < 0 || t >= V) {  // uniform over the block: every thread returns
    if (threadIdx.x == 0) atomicOr(error_word, kTargetOutOfRange);
    return;
  }
  float lse;
  if (losses) {
    lse = losses[row] + load_f32(l, t);
    __syncthreads();  // every thread has read logit[t] before any write (d may alias l)
  } else {
    float mx, s;
    row_stats<T, kVec>(l, V, &mx, &s);  // ends in __syncthreads after its last read
    lse = mx + logf(s);
  }
  if constexpr (kVec) {
    constexpr int P = kPack<T>;
    for (int64_t i = threadIdx.x; i < V / P; i += blockDim.x) {
      float v[P];
      load_pack(l, i, v);
      for (int k = 0; k < P; ++k) {
        v[k] = expf(v[k] - lse) * scale;
        if (i * P + k == t) v[k] -= scale;
      }
      store_pack(d, i, v);
    }
  } else {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      const float p = expf(load_f32(l, j) - lse) * scale;
      store_f32(d, j, j == t ? p - scale : p);
    }
  }
}

__global__ void ce_sum_kernel(const float* losses, int64_t N, double* out) {
  // One warp, fixed order per lane then a fixed shuffle tree: deterministic.
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < N; i += 32) acc += losses[i];
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x == 0) *out = acc;
}

void check(const char* op, const Tensor& logits, int64_t N) {
  expect_float_dtype(op, "logits", logits);
  WEFT_CHECK(N <= 0x7fffffff,
             std::string(op) + ": too many rows for one grid: " + std::to_string(N));
}

}  // namespace

void cross_entropy_losses(Tensor losses, const Tensor& logits, const Tensor& targets) {
  const char* op = "cross_entropy_losses";
  const int64_t V = logits.dim(-1), N = V ? logits.numel() / V : 0;
  check(op, logits, N);
  expect_cuda_dtype(op, "losses", losses, DType::F32);
  if (N == 0) return;
  WEFT_CHECK(V > 0, std::string(op) + ": empty vocabulary (logits " + logits.shape.str() + ")");
  CudaContext& ctx = CudaContext::current();
  dispatch_packed(logits.dtype, packed_rows(logits, V), [&](auto tag, auto vec) {
    using T = decltype(tag);
    ce_fwd_kernel<T, decltype(vec)::value>
        <<<static_cast<unsigned>(N), kThreads, 0, ctx.compute_stream()>>>(
            static_cast<float*>(losses.data), static_cast<const T*>(logits.data),
            static_cast<const int32_t*>(targets.data), V, ctx.error_word());
  });
  CUDA_CHECK_LAUNCH();
}

double mean_loss(const Tensor& losses) {
  const char* op = "mean_loss";
  expect_cuda_dtype(op, "losses", losses, DType::F32);
  const int64_t N = losses.numel();
  CudaContext& ctx = CudaContext::current();
  if (N == 0) {
    ctx.sync_and_check(op);
    return 0.0;
  }
  ce_sum_kernel<<<1, 32, 0, ctx.compute_stream()>>>(static_cast<const float*>(losses.data), N,
                                                    ctx.host_result());
  CUDA_CHECK_LAUNCH();
  ctx.sync_and_check(op);
  return *ctx.host_result() / static_cast<double>(N);
}

double cross_entropy_forward(Tensor losses, const Tensor& logits, const Tensor& targets) {
  cross_entropy_losses(losses, logits, targets);
  return mean_loss(losses);
}

void cross_entropy_backward(Tensor dlogits, const Tensor& logits, const Tensor& targets,
                            float scale, const Tensor* losses) {
  const char* op = "cross_entropy_backward";
  const int64_t V = logits.dim(-1), N = V ? logits.numel() / V : 0;
  check(op, logits, N);
  expect_same_dtype(op, "dlogits", dlogits, logits, "logits");
  if (losses) expect_cuda_dtype(op, "losses", *losses, DType::F32);
  if (N == 0) return;
  CudaContext& ctx = CudaContext::current();
  const bool vec = packed_rows(logits, V) && packed_rows(dlogits, V);
  dispatch_packed(logits.dtype, vec, [&](auto tag, auto vec_tag) {
    using T = decltype(tag);
    ce_bwd_kernel<T, decltype(vec_tag)::value>
        <<<static_cast<unsigned>(N), kThreads, 0, ctx.compute_stream()>>>(
            static_cast<T*>(dlogits.data), static_cast<const T*>(logits.data),
            static_cast<const int32_t*>(targets.data),
            losses ? static_cast<const float*>(losses->data) : nullptr, V, scale, ctx.error_word());
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace weft::cuda
