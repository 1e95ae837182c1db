// CPU GEMM through OpenBLAS, row-major.
// defines: cpu::gemm (explicit row strides), cpu::matmul (contiguous operands),
//          cpu::BlasSingleThreaded.
// Instantiated for float and double (matmul.cc).
#pragma once

#include <cstdint>

namespace weft::cpu {

// c[M,N] = alpha * op(a) @ op(b) + beta * c with explicit leading dimensions
// (row strides in elements), so a caller can multiply strided sub-matrices,
// e.g. one head of a [B,T,H,D] tensor (ld = H*D), without copying.
// op(a) is [M,K]: a is stored [M,K] (or [K,M] if trans_a); b likewise [K,N] / [N,K].
// beta == 0 overwrites c (NaNs already in c do not propagate).
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// Contiguous operands: c [M,N], a [M,K] or [K,M] (trans_a), b [K,N] or [N,K] (trans_b).
template <typename T>
void matmul(T* c, const T* a, const T* b, int64_t M, int64_t N, int64_t K, bool trans_a,
            bool trans_b, T alpha, T beta);

// While alive, OpenBLAS runs every call on the calling thread. For kernels
// that call gemm from inside their own OpenMP tasks (attention): OpenBLAS's
// pthread pool would otherwise be entered from every task at once, which
// oversubscribes the cores and serialises on its internal lock (measured 7x
// slower at T = 1024). The setting is process-wide, so this relies on the
// kernels being called from one compute thread (weft's comm threads never
// call BLAS). Restores the previous thread count on destruction.
class BlasSingleThreaded {
 public:
  BlasSingleThreaded();
  ~BlasSingleThreaded();
  BlasSingleThreaded(const BlasSingleThreaded&) = delete;
  BlasSingleThreaded& operator=(const BlasSingleThreaded&) = delete;

 private:
  int saved_;
};

}  // namespace weft::cpu
