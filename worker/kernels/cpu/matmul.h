// CPU GEMM through OpenBLAS, row-major.
// defines: cpu::gemm (explicit row strides), cpu::matmul (contiguous operands).
// Instantiated for float and double (matmul.cc).
#pragma once

#include <cstdint>

namespace weft::cpu {

// c[M,N] = alpha * op(a) @ op(b) + beta * c with explicit leading dimensions
// (row strides in elements), so a caller can multiply strided sub-matrices,
// e.g. one head of a [B,T,H,D] tensor (ld = H*D), without copying.
// op(a) is [M,K]: a is stored [M,K] (or [K,M] if trans_a); b likewise [K,N] / [N,K].
// beta == 0 overwrites c (NaNs already in c do not propagate).
// Large products are cut into slabs of c spread over OpenMP's threads (the
// cut depends on the shape only: the same bits for any thread count); inside
// a parallel region the calling thread does it all. OpenBLAS's own thread
// pool is never used.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// Contiguous operands: c [M,N], a [M,K] or [K,M] (trans_a), b [K,N] or [N,K] (trans_b).
template <typename T>
void matmul(T* c, const T* a, const T* b, int64_t M, int64_t N, int64_t K, bool trans_a,
            bool trans_b, T alpha, T beta);

}  // namespace weft::cpu
