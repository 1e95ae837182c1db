// CPU softmax cross-entropy over the last dimension.
// defines: cpu::cross_entropy_forward, cpu::cross_entropy_backward.
// logits/dlogits [N, V], targets i32 [N] with values in [0, V), losses [N].
// Log-sum-exp subtracts the row max first; sums of exponentials accumulate in double.
// Instantiated for float and double (cross_entropy.cc).
#pragma once

#include <cstdint>

namespace weft::cpu {

// losses[n] = logsumexp(logits[n]) - logits[n, targets[n]] (overwritten).
// Returns the mean of the unrounded per-row losses, summed in double in row
// order (bit-identical across thread counts). N == 0 returns 0. A target
// outside [0, V) aborts naming `op` and the row.
template <typename T>
double cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int64_t N,
                             int64_t V, const char* op = "cross_entropy_forward");

// dlogits = (softmax(logits) - onehot(targets)) * scale (overwritten); dlogits may
// alias logits (each row's max and sum are taken before the row is written).
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int32_t* targets, int64_t N,
                            int64_t V, T scale);

}  // namespace weft::cpu
