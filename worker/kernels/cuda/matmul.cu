// Row-major matmul through cuBLASLt (column-major): a row-major [r, c] matrix
// is the column-major [c, r] matrix with leading dimension c, so
//   C[M,N] = op(a) op(b)   <=>   C^T[N,M] = op(b)^T op(a)^T,
// i.e. cuBLASLt's "A" is our b and its "B" is our a, with the same transpose
// flags, and the result is written column-major [N, M] = row-major [M, N].
// Compute is always fp32 (CUBLAS_COMPUTE_32F: no TF32 for f32 inputs, so f32
// results match the CPU to fp32 rounding); bf16 inputs accumulate in fp32.
#include <string>

#include "kernels/cuda/cublaslt_api.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace weft::cuda {
namespace {

cudaDataType_t cuda_type(DType t) { return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// Owns the four descriptors of one call (created per call: microseconds, far
// below any matmul worth running on the GPU).
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    if (pref) cublaslt().MatmulPreferenceDestroy(pref);
    if (c) cublaslt().MatrixLayoutDestroy(c);
    if (b) cublaslt().MatrixLayoutDestroy(b);
    if (a) cublaslt().MatrixLayoutDestroy(a);
    if (op) cublaslt().MatmulDescDestroy(op);
  }
};

__global__ void scale_rows_kernel(float* c, int64_t n, float beta) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    c[i] = beta == 0.0f ? 0.0f : c[i] * beta;
}
__global__ void scale_rows_kernel(bf16* c, int64_t n, float beta) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    c[i] = __float2bfloat16_rn(beta == 0.0f ? 0.0f : __bfloat162float(c[i]) * beta);
}

}  // namespace

void matmul(Tensor c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
            float beta, int64_t M, int64_t N, int64_t K) {
  const char* op = "matmul";
  expect_float_dtype(op, "a", a);
  expect_same_dtype(op, "b", b, a, "a");
  expect_float_dtype(op, "c", c);
  WEFT_CHECK(!(a.dtype == DType::F32 && c.dtype == DType::BF16),
             "matmul: c on CUDA may be bf16 only when a and b are bf16 (got f32 inputs, bf16 c)");
  CudaContext& ctx = CudaContext::current();
  if (M == 0 || N == 0) return;
  if (K == 0) {  // op(a) op(b) is all zeros: c = beta * c
    const int64_t n = M * N;
    if (c.dtype == DType::F32)
      scale_rows_kernel<<<blocks_for(n, 256), 256, 0, ctx.compute_stream()>>>(
          static_cast<float*>(c.data), n, beta);
    else
      scale_rows_kernel<<<blocks_for(n, 256), 256, 0, ctx.compute_stream()>>>(
          static_cast<bf16*>(c.data), n, beta);
    CUDA_CHECK_LAUNCH();
    return;
  }

  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS A = our b
  const cublasOperation_t op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS B = our a
  // Stored (pre-op) column-major shapes: rows = our last dim, ld = rows.
  const uint64_t a_rows = trans_b ? K : N, a_cols = trans_b ? N : K;
  const uint64_t b_rows = trans_a ? M : K, b_cols = trans_a ? K : M;

  LtCall call;
  CUBLAS_CHECK(cublaslt().MatmulDescCreate(&call.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CUBLAS_CHECK(
      cublaslt().MatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(
      cublaslt().MatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&call.a, cuda_type(b.dtype), a_rows, a_cols,
                                          static_cast<int64_t>(a_rows)));
  CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&call.b, cuda_type(a.dtype), b_rows, b_cols,
                                          static_cast<int64_t>(b_rows)));
  CUBLAS_CHECK(
      cublaslt().MatrixLayoutCreate(&call.c, cuda_type(c.dtype), N, M, static_cast<int64_t>(N)));
  CUBLAS_CHECK(cublaslt().MatmulPreferenceCreate(&call.pref));
  const size_t ws = ctx.workspace_bytes();
  CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));

  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  CUBLAS_CHECK(cublaslt().MatmulAlgoGetHeuristic(ctx.lt(), call.op, call.a, call.b, call.c, call.c,
                                              call.pref, 1, &heur, &found));
  WEFT_CHECK(found > 0, "matmul: cuBLASLt has no algorithm for M=" + std::to_string(M) +
                            " N=" + std::to_string(N) + " K=" + std::to_string(K) + " a " +
                            dtype_name(a.dtype) + " c " + dtype_name(c.dtype) +
                            " (pointer alignment?)");
  // C and D are the same buffer: beta * c is read before d is written, per element.
  CUBLAS_CHECK(cublaslt().Matmul(ctx.lt(), call.op, &alpha, b.data, call.a, a.data, call.b, &beta,
                              c.data, call.c, c.data, call.c, &heur.algo, ctx.workspace(), ws,
                              ctx.compute_stream()));
}

}  // namespace weft::cuda
