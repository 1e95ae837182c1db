#include "kernels/cuda/cublaslt_api.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "tensor/tensor.h"

namespace weft::cuda {

namespace {

CublasLtApi load() {
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("/usr/local/cuda/lib64/libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
  WEFT_CHECK(h != nullptr, "cannot load " + soname + ": " + dlerror());
  CublasLtApi api{};
  auto sym = [h](auto& fn, const char* name) {
    void* p = dlsym(h, name);
    WEFT_CHECK(p != nullptr, std::string("cuBLASLt has no ") + name);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  sym(api.Create, "cublasLtCreate");
  sym(api.Destroy, "cublasLtDestroy");
  sym(api.Matmul, "cublasLtMatmul");
  sym(api.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  sym(api.MatmulDescCreate, "cublasLtMatmulDescCreate");
  sym(api.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  sym(api.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  sym(api.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  sym(api.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  sym(api.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  sym(api.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  sym(api.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  sym(api.GetStatusString, "cublasLtGetStatusString");
  return api;
}

}  // namespace

const CublasLtApi& cublaslt() {
  static const CublasLtApi api = load();
  return api;
}

}  // namespace weft::cuda
