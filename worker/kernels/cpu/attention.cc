#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/vec_exp.h"
#include "tensor/tensor.h"

// Work is split into tasks of one (batch, kv head) pair: a task owns its
// slices of dk and dv, so the sum over the query heads of a group needs no
// synchronisation and happens in a fixed order. Within a task each query head
// is processed in blocks of kRowBlock query rows; because of the causal mask a
// block starting at row r0 only needs key columns [0, r0 + rows), which halves
// the work compared to full [T, T] products. The per-block products go
// through BLAS with row strides (ld = H * D) straight on the [B, T, H, D]
// tensors, so no head is ever copied out. Parallelism comes from the tasks;
// gemm runs on the calling task's thread there (see gemm in matmul.cc).

namespace weft::cpu {
namespace {

constexpr int64_t kRowBlock = 64;

// p[i, 0:cols) = scale * q[r0 + i] . k[j] for the rows of a block; then turns
// each row into probabilities exp(s - lse) with the causal mask applied, and
// with starts (packed documents) also the mask of keys before the first
// position of the query's document: row r sees keys [starts[r], r].
// When lse_in is null the row's log-sum-exp is computed and stored in lse_out.
template <typename T>
void block_probs(T* p, int64_t ldp, const T* qh, int64_t ldq, const T* kh, int64_t ldk,
                 int64_t r0, int64_t rows, int64_t D, T scale, const T* lse_in, T* lse_out,
                 const int32_t* starts) {
  const int64_t cols = r0 + rows;
  gemm<T>(false, true, rows, cols, D, scale, qh + r0 * ldq, ldq, kh, ldk, T(0), p, ldp);
  for (int64_t i = 0; i < rows; ++i) {
    T* row = p + i * ldp;
    const int64_t valid = r0 + i + 1;  // key columns j <= query row r0 + i
    const int64_t first = starts ? starts[r0 + i] : 0;
    for (int64_t j = 0; j < first; ++j) row[j] = T(0);
    T* seen = row + first;
    const int64_t n = valid - first;
    if (lse_in) {
      exp_shifted_sum(seen, seen, n, lse_in[r0 + i]);
    } else {
      T mx = seen[0];
      for (int64_t j = 1; j < n; ++j) mx = std::max(mx, seen[j]);
      const double s = exp_shifted_sum(seen, seen, n, mx);
      lse_out[r0 + i] = static_cast<T>(static_cast<double>(mx) + std::log(s));
      const T inv = static_cast<T>(1.0 / s);
      for (int64_t j = 0; j < n; ++j) seen[j] *= inv;
    }
    for (int64_t j = valid; j < cols; ++j) row[j] = T(0);
  }
}

void check_starts(const char* op, const int32_t* starts, int64_t B, int64_t T_) {
  if (!starts) return;
  for (int64_t r = 0; r < B * T_; ++r)
    WEFT_CHECK(starts[r] >= 0 && starts[r] <= r % T_,
               std::string(op) + ": document start " + std::to_string(starts[r]) + " of position " +
                   std::to_string(r % T_) + " is not in [0, position]");
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, int64_t B,
                       int64_t T_, int64_t Hq, int64_t Hkv, int64_t D, const int32_t* starts) {
  WEFT_CHECK(Hkv > 0 && Hq % Hkv == 0, "attention_forward: Hq must be a multiple of Hkv");
  check_starts("attention_forward", starts, B, T_);
  const int64_t G = Hq / Hkv;
  const int64_t ldq = Hq * D, ldkv = Hkv * D;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));
#pragma omp parallel
  {
    std::vector<T> p(static_cast<size_t>(std::min(kRowBlock, T_) * T_));
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < B * Hkv; ++task) {
      const int64_t b = task / Hkv, kvh = task % Hkv;
      const T* kh = k + b * T_ * ldkv + kvh * D;
      const T* vh = v + b * T_ * ldkv + kvh * D;
      for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h) {
        const T* qh = q + b * T_ * ldq + h * D;
        T* oh = out + b * T_ * ldq + h * D;
        T* lh = lse + (b * Hq + h) * T_;
        for (int64_t r0 = 0; r0 < T_; r0 += kRowBlock) {
          const int64_t rows = std::min(kRowBlock, T_ - r0);
          block_probs<T>(p.data(), T_, qh, ldq, kh, ldkv, r0, rows, D, scale, nullptr, lh,
                         starts ? starts + b * T_ : nullptr);
          gemm<T>(false, false, rows, D, r0 + rows, T(1), p.data(), T_, vh, ldkv, T(0),
                  oh + r0 * ldq, ldq);
        }
      }
    }
  }
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, int64_t B, int64_t T_, int64_t Hq,
                        int64_t Hkv, int64_t D, const int32_t* starts) {
  WEFT_CHECK(Hkv > 0 && Hq % Hkv == 0, "attention_backward: Hq must be a multiple of Hkv");
  check_starts("attention_backward", starts, B, T_);
  const int64_t G = Hq / Hkv;
  const int64_t ldq = Hq * D, ldkv = Hkv * D;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));
#pragma omp parallel
  {
    const size_t block = static_cast<size_t>(std::min(kRowBlock, T_) * T_);
    std::vector<T> p(block), ds(block);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < B * Hkv; ++task) {
      const int64_t b = task / Hkv, kvh = task % Hkv;
      const T* kh = k + b * T_ * ldkv + kvh * D;
      const T* vh = v + b * T_ * ldkv + kvh * D;
      T* dkh = dk + b * T_ * ldkv + kvh * D;
      T* dvh = dv + b * T_ * ldkv + kvh * D;
      for (int64_t t = 0; t < T_; ++t) {
        std::memset(dkh + t * ldkv, 0, sizeof(T) * D);
        std::memset(dvh + t * ldkv, 0, sizeof(T) * D);
      }
      for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h) {
        const int64_t off = b * T_ * ldq + h * D;
        const T *qh = q + off, *oh = out + off, *doh = dout + off;
        T* dqh = dq + off;
        const T* lh = lse + (b * Hq + h) * T_;
        for (int64_t r0 = 0; r0 < T_; r0 += kRowBlock) {
          const int64_t rows = std::min(kRowBlock, T_ - r0), cols = r0 + rows;
          block_probs<T>(p.data(), T_, qh, ldq, kh, ldkv, r0, rows, D, scale, lh, nullptr,
                         starts ? starts + b * T_ : nullptr);
          // dV[0:cols] += P^T dO[rows]
          gemm<T>(true, false, cols, D, rows, T(1), p.data(), T_, doh + r0 * ldq, ldq, T(1), dvh,
                  ldkv);
          // dP = dO[rows] V[0:cols]^T
          gemm<T>(false, true, rows, cols, D, T(1), doh + r0 * ldq, ldq, vh, ldkv, T(0),
                  ds.data(), T_);
          // dS = P * (dP - rowsum(dO * O)) * scale; masked entries have P = 0.
          for (int64_t i = 0; i < rows; ++i) {
            const T* o_row = oh + (r0 + i) * ldq;
            const T* do_row = doh + (r0 + i) * ldq;
            double di = 0.0;
            for (int64_t d = 0; d < D; ++d) di += static_cast<double>(o_row[d]) * do_row[d];
            const T dt = static_cast<T>(di);
            T* ds_row = ds.data() + i * T_;
            const T* p_row = p.data() + i * T_;
            for (int64_t j = 0; j < cols; ++j) ds_row[j] = p_row[j] * (ds_row[j] - dt) * scale;
          }
          // dQ[rows] = dS K[0:cols];  dK[0:cols] += dS^T Q[rows]
          gemm<T>(false, false, rows, D, cols, T(1), ds.data(), T_, kh, ldkv, T(0),
                  dqh + r0 * ldq, ldq);
          gemm<T>(true, false, cols, D, rows, T(1), ds.data(), T_, qh + r0 * ldq, ldq, T(1), dkh,
                  ldkv);
        }
      }
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, const float*, const float*,
                                       int64_t, int64_t, int64_t, int64_t, int64_t, const int32_t*);
template void attention_forward<double>(double*, double*, const double*, const double*,
                                        const double*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                        const int32_t*);
template void attention_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, const float*,
                                        int64_t, int64_t, int64_t, int64_t, int64_t, const int32_t*);
template void attention_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*,
                                         const double*, int64_t, int64_t, int64_t, int64_t,
                                         int64_t, const int32_t*);

}  // namespace weft::cpu
