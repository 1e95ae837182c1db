#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace weft::cpu {
namespace {

void check_targets(const char* op, const int32_t* targets, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n)
    WEFT_CHECK(targets[n] >= 0 && targets[n] < V,
               std::string(op) + ": target " + std::to_string(targets[n]) + " at row " +
                   std::to_string(n) + " is outside [0, " + std::to_string(V) + ")");
}

// Returns (row max, sum of exp(l - max) in double). exp is taken in T: it is
// the expensive part (N*V calls) and the max subtraction keeps it in [0, 1].
template <typename T>
void row_stats(const T* l, int64_t V, T* max_out, double* sum_out) {
  T mx = l[0];
  for (int64_t j = 1; j < V; ++j) mx = l[j] > mx ? l[j] : mx;
  double s = 0.0;
  for (int64_t j = 0; j < V; ++j) s += static_cast<double>(std::exp(l[j] - mx));
  *max_out = mx;
  *sum_out = s;
}

}  // namespace

template <typename T>
double cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int64_t N,
                             int64_t V) {
  check_targets("cross_entropy_forward", targets, N, V);
  if (N == 0) return 0.0;
  std::vector<double> row_loss(static_cast<size_t>(N));
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* l = logits + n * V;
    T mx;
    double s;
    row_stats(l, V, &mx, &s);
    double loss = static_cast<double>(mx) + std::log(s) - static_cast<double>(l[targets[n]]);
    row_loss[n] = loss;
    losses[n] = static_cast<T>(loss);
  }
  double total = 0.0;
  for (double x : row_loss) total += x;
  return total / static_cast<double>(N);
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int32_t* targets, int64_t N,
                            int64_t V, T scale) {
  check_targets("cross_entropy_backward", targets, N, V);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* l = logits + n * V;
    T* d = dlogits + n * V;
    T mx;
    double s;
    row_stats(l, V, &mx, &s);
    T inv = static_cast<T>(1.0 / s);
    for (int64_t j = 0; j < V; ++j) d[j] = std::exp(l[j] - mx) * inv * scale;
    d[targets[n]] -= scale;
  }
}

template double cross_entropy_forward<float>(float*, const float*, const int32_t*, int64_t,
                                             int64_t);
template double cross_entropy_forward<double>(double*, const double*, const int32_t*, int64_t,
                                              int64_t);
template void cross_entropy_backward<float>(float*, const float*, const int32_t*, int64_t, int64_t,
                                            float);
template void cross_entropy_backward<double>(double*, const double*, const int32_t*, int64_t,
                                             int64_t, double);

}  // namespace weft::cpu
