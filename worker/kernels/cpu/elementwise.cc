#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/bf16.h"

namespace weft::cpu {
namespace {
// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;
constexpr int64_t kSumChunk = 1 << 14;
}  // namespace

template <typename T>
void fill(T* x, int64_t n, T value) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

template <typename T>
void copy(T* dst, const T* src, int64_t n) {
  if (dst == src || n == 0) return;
  std::memcpy(dst, src, sizeof(T) * static_cast<size_t>(n));
}

template <typename T>
void add_acc(T* y, const T* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

template <typename T>
void scale(T* x, int64_t n, T s) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

template <typename T>
double sum_squares(const T* x, int64_t n) {
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t i0 = ch * kSumChunk, i1 = std::min(n, i0 + kSumChunk);
    double s = 0.0;
    for (int64_t i = i0; i < i1; ++i) s += static_cast<double>(x[i]) * x[i];
    partial[ch] = s;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

#define WEFT_ELEMENTWISE_INSTANTIATE(T)              \
  template void fill<T>(T*, int64_t, T);             \
  template void copy<T>(T*, const T*, int64_t);      \
  template void add_acc<T>(T*, const T*, int64_t);   \
  template void scale<T>(T*, int64_t, T);            \
  template double sum_squares<T>(const T*, int64_t);
WEFT_ELEMENTWISE_INSTANTIATE(float)
WEFT_ELEMENTWISE_INSTANTIATE(double)
#undef WEFT_ELEMENTWISE_INSTANTIATE
template void fill<uint16_t>(uint16_t*, int64_t, uint16_t);
template void fill<int32_t>(int32_t*, int64_t, int32_t);
template void copy<unsigned char>(unsigned char*, const unsigned char*, int64_t);

void cast_to_bf16(uint16_t* dst, const float* src, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void cast_from_bf16(float* dst, const uint16_t* src, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

}  // namespace weft::cpu
