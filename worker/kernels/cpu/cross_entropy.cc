#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/vec_exp.h"
#include "tensor/tensor.h"

namespace weft::cpu {
namespace {

void check_targets(const char* op, const int32_t* targets, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n)
    WEFT_CHECK(targets[n] >= 0 && targets[n] < V,
               std::string(op) + ": target " + std::to_string(targets[n]) + " at row " +
                   std::to_string(n) + " is outside [0, " + std::to_string(V) + ")");
}

template <typename T>
T row_max(const T* l, int64_t V) {
  T mx = l[0];
  for (int64_t j = 1; j < V; ++j) mx = l[j] > mx ? l[j] : mx;
  return mx;
}

}  // namespace

template <typename T>
double cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int64_t N,
                             int64_t V, const char* op) {
  check_targets(op, targets, N, V);
  if (N == 0) return 0.0;
  std::vector<double> row_loss(static_cast<size_t>(N));
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* l = logits + n * V;
    const T mx = row_max(l, V);
    const double s = sum_exp_shifted(l, V, mx);
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
    const T mx = row_max(l, V);
    const int32_t t = targets[n];  // read before d (possibly == l) is overwritten
    // One exp per element: d holds exp(l - max) first, then is normalised.
    const double s = exp_shifted_sum(d, l, V, mx);
    const T k = static_cast<T>(static_cast<double>(scale) / s);
    for (int64_t j = 0; j < V; ++j) d[j] *= k;
    d[t] -= scale;
  }
}

template double cross_entropy_forward<float>(float*, const float*, const int32_t*, int64_t,
                                             int64_t, const char*);
template double cross_entropy_forward<double>(double*, const double*, const int32_t*, int64_t,
                                              int64_t, const char*);
template void cross_entropy_backward<float>(float*, const float*, const int32_t*, int64_t, int64_t,
                                            float);
template void cross_entropy_backward<double>(double*, const double*, const int32_t*, int64_t,
                                             int64_t, double);

}  // namespace weft::cpu
