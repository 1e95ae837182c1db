#include "kernels/cpu/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <limits>
#include <string>

#include "tensor/tensor.h"

namespace weft::cpu {
namespace {

// cblas takes 32-bit sizes; a silent truncation would multiply garbage.
int blas_int(int64_t v, const char* what) {
  WEFT_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(),
             std::string("gemm: ") + what + " = " + std::to_string(v) + " does not fit in a BLAS int");
  return static_cast<int>(v);
}

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
               const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, double alpha,
               const double* a, int lda, const double* b, int ldb, double beta, double* c,
               int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    // BLAS implementations disagree on K == 0; the contract is c = beta * c.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  blas_gemm(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
            blas_int(M, "M"), blas_int(N, "N"), blas_int(K, "K"), alpha, a, blas_int(lda, "lda"),
            b, blas_int(ldb, "ldb"), beta, c, blas_int(ldc, "ldc"));
}

template <typename T>
void matmul(T* c, const T* a, const T* b, int64_t M, int64_t N, int64_t K, bool trans_a,
            bool trans_b, T alpha, T beta) {
  // Row-major leading dimension = stored row width, at least 1 for BLAS argument checks.
  int64_t lda = std::max<int64_t>(1, trans_a ? M : K);
  int64_t ldb = std::max<int64_t>(1, trans_b ? K : N);
  gemm<T>(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, c, std::max<int64_t>(1, N));
}

BlasSingleThreaded::BlasSingleThreaded() : saved_(openblas_get_num_threads()) {
  if (saved_ != 1) openblas_set_num_threads(1);
}

BlasSingleThreaded::~BlasSingleThreaded() {
  if (saved_ != 1) openblas_set_num_threads(saved_);
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);
template void matmul<float>(float*, const float*, const float*, int64_t, int64_t, int64_t, bool,
                            bool, float, float);
template void matmul<double>(double*, const double*, const double*, int64_t, int64_t, int64_t,
                             bool, bool, double, double);

}  // namespace weft::cpu
