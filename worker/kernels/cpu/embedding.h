// CPU token embedding. defines: cpu::embedding_forward, cpu::embedding_backward.
// Shapes: tokens i32 [N] with values in [0, V), weight [V, C], out/dout [N, C].
// Instantiated for float and double (embedding.cc); forward also for
// uint16_t, the raw bits of bf16.
#pragma once

#include <cstdint>

namespace weft::cpu {

// out[n, :] = weight[tokens[n], :] (overwritten). Aborts on a token outside [0, V).
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* weight, int64_t N, int64_t C,
                       int64_t V);

// dweight[tokens[n], :] += dout[n, :] (accumulated). Deterministic: every weight
// column is summed over n in increasing order whatever the thread count.
template <typename T>
void embedding_backward(T* dweight, const int32_t* tokens, const T* dout, int64_t N, int64_t C,
                        int64_t V);

}  // namespace weft::cpu
