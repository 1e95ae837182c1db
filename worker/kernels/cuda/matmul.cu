// Row-major matmul through cuBLASLt (column-major): a row-major [r, c] matrix
// is the column-major [c, r] matrix with leading dimension c, so
//   C[M,N] = op(a) op(b)   <=>   C^T[N,M] = op(b)^T op(a)^T,
// i.e. cuBLASLt's "A" is our b and its "B" is our a, with the same transpose
// flags, and the result is written column-major [N, M] = row-major [M, N].
// Compute is always fp32 (CUBLAS_COMPUTE_32F: no TF32 for f32 inputs, so f32
// results match the CPU to fp32 rounding); bf16 inputs accumulate in fp32.
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "kernels/cuda/cublaslt_api.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace weft::cuda {
namespace {

cudaDataType_t cuda_type(DType t) { return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// The descriptors and the heuristic's algorithm of one matmul shape. Built on
// the first call of a shape and kept for the process (a training step repeats
// the same few dozen shapes thousands of times; building them costs tens of
// microseconds of host time per call, which at small batches is time the GPU
// waits for the next launch).
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    if (c) cublaslt().MatrixLayoutDestroy(c);
    if (b) cublaslt().MatrixLayoutDestroy(b);
    if (a) cublaslt().MatrixLayoutDestroy(a);
    if (op) cublaslt().MatmulDescDestroy(op);
  }
};

struct PlanKey {
  int device;
  int64_t M, N, K;
  bool trans_a, trans_b;
  DType ab, c;
  bool operator==(const PlanKey& o) const {
    return device == o.device && M == o.M && N == o.N && K == o.K && trans_a == o.trans_a &&
           trans_b == o.trans_b && ab == o.ab && c == o.c;
  }
};
struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    size_t h = std::hash<int64_t>()(k.M);
    for (int64_t v : {k.N, k.K, int64_t{k.device}, int64_t{k.trans_a} * 2 + k.trans_b,
                      int64_t(k.ab) * 16 + int64_t(k.c)})
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};

// Per thread: each thread drives one device's compute stream, so no lock.
// The plans are never destroyed before exit (thread_local destructors run
// while the cuBLASLt library may already be unloaded), hence the leak.
using PlanCache = std::unordered_map<PlanKey, std::unique_ptr<LtPlan>, PlanKeyHash>;
PlanCache& plan_cache() {
  thread_local PlanCache* cache = new PlanCache();
  return *cache;
}

const LtPlan& plan_for(const PlanKey& key, CudaContext& ctx) {
  PlanCache& cache = plan_cache();
  if (auto it = cache.find(key); it != cache.end()) return *it->second;
  const auto [device, M, N, K, trans_a, trans_b, ab, c_type] = key;
  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS A = our b
  const cublasOperation_t op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS B = our a
  // Stored (pre-op) column-major shapes: rows = our last dim, ld = rows.
  const uint64_t a_rows = trans_b ? K : N, a_cols = trans_b ? N : K;
  const uint64_t b_rows = trans_a ? M : K, b_cols = trans_a ? K : M;

  auto plan = std::make_unique<LtPlan>();
  CUBLAS_CHECK(cublaslt().MatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CUBLAS_CHECK(
      cublaslt().MatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(
      cublaslt().MatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&plan->a, cuda_type(ab), a_rows, a_cols,
                                             static_cast<int64_t>(a_rows)));
  CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&plan->b, cuda_type(ab), b_rows, b_cols,
                                             static_cast<int64_t>(b_rows)));
  CUBLAS_CHECK(
      cublaslt().MatrixLayoutCreate(&plan->c, cuda_type(c_type), N, M, static_cast<int64_t>(N)));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublaslt().MatmulPreferenceCreate(&pref));
  const size_t ws = ctx.workspace_bytes();
  cublasStatus_t st = cublaslt().MatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublaslt().MatmulAlgoGetHeuristic(ctx.lt(), plan->op, plan->a, plan->b, plan->c, plan->c,
                                           pref, 1, &heur, &found);
  cublaslt().MatmulPreferenceDestroy(pref);
  CUBLAS_CHECK(st);
  WEFT_CHECK(found > 0, "matmul: cuBLASLt has no algorithm for M=" + std::to_string(M) +
                            " N=" + std::to_string(N) + " K=" + std::to_string(K) + " a " +
                            dtype_name(ab) + " c " + dtype_name(c_type) + " (pointer alignment?)");
  plan->algo = heur.algo;
  return *cache.emplace(key, std::move(plan)).first->second;
}

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

  const LtPlan& plan = plan_for({ctx.device(), M, N, K, trans_a, trans_b, a.dtype, c.dtype}, ctx);
  // C and D are the same buffer: beta * c is read before d is written, per element.
  CUBLAS_CHECK(cublaslt().Matmul(ctx.lt(), plan.op, &alpha, b.data, plan.a, a.data, plan.b, &beta,
                                 c.data, plan.c, c.data, plan.c, &plan.algo, ctx.workspace(),
                                 ctx.workspace_bytes(), ctx.compute_stream()));
}

}  // namespace weft::cuda
