#include "kernels/cpu/embedding.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "tensor/tensor.h"

namespace weft::cpu {
namespace {

void check_tokens(const char* op, const int32_t* tokens, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n)
    WEFT_CHECK(tokens[n] >= 0 && tokens[n] < V,
               std::string(op) + ": token " + std::to_string(tokens[n]) + " at position " +
                   std::to_string(n) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
}

// Columns handled by one task in backward: wide enough to stream rows, narrow
// enough that C = 128 still gives two tasks.
constexpr int64_t kColumnBlock = 64;

}  // namespace

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* weight, int64_t N, int64_t C,
                       int64_t V) {
  check_tokens("embedding_forward", tokens, N, V);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    std::memcpy(out + n * C, weight + static_cast<int64_t>(tokens[n]) * C, sizeof(T) * C);
}

template <typename T>
void embedding_backward(T* dweight, const int32_t* tokens, const T* dout, int64_t N, int64_t C,
                        int64_t V) {
  check_tokens("embedding_backward", tokens, N, V);
  // Rows of dweight repeat (same token twice), so parallelising over n would
  // race; splitting the columns instead keeps each sum sequential in n, which
  // makes the result bit-identical across runs and thread counts.
  int64_t blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int64_t cb = 0; cb < blocks; ++cb) {
    int64_t c0 = cb * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
    for (int64_t n = 0; n < N; ++n) {
      T* dst = dweight + static_cast<int64_t>(tokens[n]) * C;
      const T* src = dout + n * C;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, int64_t, int64_t,
                                       int64_t);
template void embedding_forward<double>(double*, const int32_t*, const double*, int64_t, int64_t,
                                        int64_t);
// bf16 rows are copied as raw bits: rounding a widened bf16 gives it back.
template void embedding_forward<uint16_t>(uint16_t*, const int32_t*, const uint16_t*, int64_t,
                                          int64_t, int64_t);
template void embedding_backward<float>(float*, const int32_t*, const float*, int64_t, int64_t,
                                        int64_t);
template void embedding_backward<double>(double*, const int32_t*, const double*, int64_t, int64_t,
                                         int64_t);

}  // namespace weft::cpu
