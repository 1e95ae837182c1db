#include "kernels/cpu/swiglu.h"

#include <cmath>

namespace weft::cpu {
namespace {

// exp(-g) overflows to inf for very negative g, which correctly gives 0.
template <typename T>
T sigmoid(T g) {
  return T(1) / (T(1) + std::exp(-g));
}

}  // namespace

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    T g = gate[i];
    out[i] = g * sigmoid(g) * up[i];
  }
}

template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    T g = gate[i], u = up[i], d = dout[i];  // read everything before writing (aliasing)
    T s = sigmoid(g);
    dgate[i] = d * u * s * (T(1) + g * (T(1) - s));
    dup[i] = d * g * s;
  }
}

template void swiglu_forward<float>(float*, const float*, const float*, int64_t);
template void swiglu_forward<double>(double*, const double*, const double*, int64_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*,
                                     int64_t);
template void swiglu_backward<double>(double*, double*, const double*, const double*,
                                      const double*, int64_t);

}  // namespace weft::cpu
