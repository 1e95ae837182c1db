// CPU AdamW with decoupled weight decay over one contiguous range of n elements.
// defines: cpu::adamw_update.
// Instantiated for float and double (adamw.cc).
#pragma once

#include <cstdint>

namespace weft::cpu {

// With t = step >= 1 (bias corrections computed in double, then cast to T):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd * p).
// param, m, v updated in place; grad is read only, and taken as grad *
// grad_scale (gradient clipping's coefficient, fused: no pass over the grads).
template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, int64_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int64_t step,
                  double grad_scale = 1.0);

}  // namespace weft::cpu
