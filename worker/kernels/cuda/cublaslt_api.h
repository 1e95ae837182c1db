// cuBLASLt, loaded on first use with dlopen instead of being linked.
//
// Why: libcublasLt carries a large initial-exec TLS block. Linked into the
// worker, glibc reserves it in every thread's static TLS, and threads created
// with small stacks (the Prometheus exposer's civetweb threads) fail to start,
// even in CPU-only runs. Loaded with dlopen, its TLS is allocated lazily and
// only processes that run CUDA matmuls pay for it.
#pragma once

#include <cublasLt.h>

namespace weft::cuda {

struct CublasLtApi {
  decltype(&::cublasLtCreate) Create;
  decltype(&::cublasLtDestroy) Destroy;
  decltype(&::cublasLtMatmul) Matmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&::cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&::cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&::cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&::cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&::cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&::cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&::cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
  decltype(&::cublasLtGetStatusString) GetStatusString;
};

// Loads libcublasLt.so.<major> on the first call (thread-safe); aborts with
// the dlopen/dlsym error when the library or a symbol is missing.
const CublasLtApi& cublaslt();

}  // namespace weft::cuda
