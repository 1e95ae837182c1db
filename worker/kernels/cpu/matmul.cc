#include "kernels/cpu/matmul.h"

#include <cblas.h>
#include <omp.h>

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

// gemm's output is cut into slabs of this many rows (or columns) along its
// longer side, each one single-threaded OpenBLAS call, spread over OpenMP's
// threads. The cut depends on the shape only, so the result is the same for
// any thread count. Below kSlabbedMin multiply-adds one call does it all.
constexpr int64_t kSlab = 256;
constexpr int64_t kSlabbedMin = int64_t{1} << 22;

// OpenBLAS's own pthread pool stays unused: weft's kernels have one thread
// pool, OpenMP's. Two pools on the same cores woke and waited for each other
// on every matmul; beside other processes (ranks sharing a node, even niced
// ones) each wake waited for a scheduler slice (tiny preset on 2 cores: 0.15-
// 0.18 s a step with OpenBLAS threaded, 0.086 s with it single-threaded).
void blas_on_calling_thread_only() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
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
  blas_on_calling_thread_only();
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  const int ilda = blas_int(lda, "lda"), ildb = blas_int(ldb, "ldb"), ildc = blas_int(ldc, "ldc");
  blas_int(K, "K");
  if (M * N * K < kSlabbedMin || std::max(M, N) <= kSlab) {
    blas_gemm(ta, tb, blas_int(M, "M"), blas_int(N, "N"), static_cast<int>(K), alpha, a, ilda, b,
              ildb, beta, c, ildc);
    return;
  }
  // Slabs of c's rows take the same rows of op(a) and all of op(b); slabs of
  // its columns take the same columns of op(b) and all of op(a). Row-major:
  // op(a)'s row i starts at a + i*lda, or at a + i when a is stored transposed.
  const bool by_rows = M >= N;
  const int64_t extent = by_rows ? M : N;
  const int64_t slabs = (extent + kSlab - 1) / kSlab;
  auto slab = [&](int64_t s) {
    const int64_t lo = s * kSlab, len = std::min(kSlab, extent - lo);
    if (by_rows) {
      blas_gemm(ta, tb, static_cast<int>(len), blas_int(N, "N"), static_cast<int>(K), alpha,
                a + (trans_a ? lo : lo * lda), ilda, b, ildb, beta, c + lo * ldc, ildc);
    } else {
      blas_gemm(ta, tb, blas_int(M, "M"), static_cast<int>(len), static_cast<int>(K), alpha, a,
                ilda, b + (trans_b ? lo * ldb : lo), ildb, beta, c + lo, ildc);
    }
  };
  if (omp_in_parallel()) {  // a kernel's own task (attention): this thread does it all
    for (int64_t s = 0; s < slabs; ++s) slab(s);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t s = 0; s < slabs; ++s) slab(s);
}

template <typename T>
void matmul(T* c, const T* a, const T* b, int64_t M, int64_t N, int64_t K, bool trans_a,
            bool trans_b, T alpha, T beta) {
  // Row-major leading dimension = stored row width, at least 1 for BLAS argument checks.
  int64_t lda = std::max<int64_t>(1, trans_a ? M : K);
  int64_t ldb = std::max<int64_t>(1, trans_b ? K : N);
  gemm<T>(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, c, std::max<int64_t>(1, N));
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
