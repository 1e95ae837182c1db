// CPU causal self-attention with grouped KV heads.
// defines: cpu::attention_forward, cpu::attention_backward.
// Layouts: q/out/dq/dout [B, T, Hq, D]; k/v/dk/dv [B, T, Hkv, D]; lse [B, Hq, T].
// Query head h reads kv head h / (Hq / Hkv); scores are scaled by 1/sqrt(D).
// Nothing of size [T, T] lives between forward and backward: backward rebuilds
// the probabilities from q, k and the saved log-sum-exp, a block of rows at a
// time in per-thread scratch. Instantiated for float and double (attention.cc).
#pragma once

#include <cstdint>

namespace weft::cpu {

// out = softmax(q k^T / sqrt(D) + causal mask) v; lse[b, h, t] = log-sum-exp of
// the scaled, masked score row (b, h, t). out and lse overwritten.
// starts (packed documents; null: none) is [B, T]: query t of row b sees keys
// [starts[b, t], t] only (its own document), 0 <= starts[b, t] <= t.
template <typename T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, int64_t B,
                       int64_t T_, int64_t Hq, int64_t Hkv, int64_t D, const int32_t* starts = nullptr);

// dq, dk, dv overwritten; dk/dv are summed over the Hq/Hkv query heads that
// share a kv head, in increasing head order (deterministic).
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, int64_t B, int64_t T_, int64_t Hq,
                        int64_t Hkv, int64_t D, const int32_t* starts = nullptr);

}  // namespace weft::cpu
