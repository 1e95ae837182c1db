#include "kernels/cpu/rmsnorm.h"

#include <algorithm>
#include <cmath>

namespace weft::cpu {
namespace {
constexpr int64_t kColumnBlock = 64;
}  // namespace

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t N, int64_t C, double eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    T r = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(C) + eps));
    rstd[n] = r;
    T* o = out + n * C;
    for (int64_t c = 0; c < C; ++c) o[c] = xr[c] * r * w[c];
  }
}

template <typename T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd,
                      int64_t N, int64_t C) {
  // dw first, column blocks in parallel, rows in order: no race, no
  // thread-count dependent rounding, and dx may then overwrite dout or x.
  int64_t blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int64_t cb = 0; cb < blocks; ++cb) {
    int64_t c0 = cb * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
    double acc[kColumnBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const T* g = dout + n * C;
      const T* xr = x + n * C;
      double r = rstd[n];
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += static_cast<double>(g[c]) * xr[c] * r;
    }
    for (int64_t c = c0; c < c1; ++c) dw[c] += static_cast<T>(acc[c - c0]);
  }

  // y_c = x_c r w_c with r = (mean(x^2) + eps)^-1/2, dr/dx_j = -r^3 x_j / C, so
  // dx_j = r (w_j g_j - x_j r^2 <g*w, x> / C).
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* g = dout + n * C;
    const T* xr = x + n * C;
    double dot = 0.0;
    for (int64_t c = 0; c < C; ++c) dot += static_cast<double>(g[c]) * w[c] * xr[c];
    T r = rstd[n];
    T k = static_cast<T>(static_cast<double>(r) * r * dot / static_cast<double>(C));
    T* d = dx + n * C;
    for (int64_t c = 0; c < C; ++c) d[c] = r * (w[c] * g[c] - xr[c] * k);
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t,
                                     double);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int64_t,
                                      int64_t, double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int64_t, int64_t);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int64_t, int64_t);

}  // namespace weft::cpu
