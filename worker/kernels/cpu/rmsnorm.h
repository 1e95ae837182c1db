// CPU RMSNorm over the last dimension. defines: cpu::rmsnorm_forward, cpu::rmsnorm_backward.
// Shapes: x/out/dout/dx [N, C], w/dw [C], rstd [N]. Statistics accumulate in double.
// Instantiated for float and double (rmsnorm.cc).
#pragma once

#include <cstdint>

namespace weft::cpu {

// out = x * rstd * w, rstd[n] = 1/sqrt(mean(x[n]^2) + eps); out and rstd overwritten.
// out may alias x.
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t N, int64_t C, double eps);

// dx overwritten, dw accumulated (+=, summed over n in order: deterministic).
// dx may alias dout or x (dw is finished before dx is written).
template <typename T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd,
                      int64_t N, int64_t C);

}  // namespace weft::cpu
