#include "kernels/cpu/adamw.h"

#include <cmath>
#include <string>

#include "tensor/tensor.h"

namespace weft::cpu {

template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, int64_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int64_t step, double grad_scale) {
  WEFT_CHECK(step >= 1, "adamw_update: step must be >= 1 (bias correction), got " +
                            std::to_string(step));
  const double t = static_cast<double>(step);
  const T inv_bc1 = static_cast<T>(1.0 / (1.0 - std::pow(beta1, t)));
  const T inv_bc2 = static_cast<T>(1.0 / (1.0 - std::pow(beta2, t)));
  const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
  const T one_b1 = static_cast<T>(1.0 - beta1), one_b2 = static_cast<T>(1.0 - beta2);
  const T lr_t = static_cast<T>(lr), eps_t = static_cast<T>(eps);
  const T wd = static_cast<T>(weight_decay), gs = static_cast<T>(grad_scale);
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (int64_t i = 0; i < n; ++i) {
    T g = grad[i] * gs;
    T mi = b1 * m[i] + one_b1 * g;
    T vi = b2 * v[i] + one_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    T p = param[i];
    param[i] = p - lr_t * (mi * inv_bc1 / (std::sqrt(vi * inv_bc2) + eps_t) + wd * p);
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, double, double,
                                  double, double, double, int64_t, double);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, double,
                                   double, double, double, double, int64_t, double);

}  // namespace weft::cpu
