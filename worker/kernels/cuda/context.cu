// Lazily created per-device contexts (see context.h for why a table exists).
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "kernels/cuda/cublaslt_api.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_check.h"
#include "tensor/tensor.h"

namespace weft::cuda {

void gpu_fatal(const char* lib, int code, const char* text, const char* stmt, const char* func,
               const char* file, int line) {
  std::fprintf(stderr, "weft: fatal: %s error %d (%s) in `%s` at %s (%s:%d)\n", lib, code,
               text ? text : "?", stmt, func, file, line);
  std::fflush(stderr);
  std::abort();
}

namespace {
constexpr int kMaxDevices = 64;
// cuBLASLt's recommendation for Hopper (32 MiB) covers Ampere's 4 MiB too.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
}  // namespace

CudaContext::CudaContext(int device) : device_(device) {
  CUDA_CHECK(cudaStreamCreate(&stream_));
  CUBLAS_CHECK(cublaslt().Create(&lt_));
  workspace_bytes_ = kWorkspaceBytes;
  // Direct cudaMalloc: these live for the process, so they stay out of the
  // caching allocator's in-use figure (they are reported by nobody; 32 MiB).
  CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  CUDA_CHECK(cudaMalloc(&error_word_, sizeof(uint32_t)));
  CUDA_CHECK(cudaMemset(error_word_, 0, sizeof(uint32_t)));
  CUDA_CHECK(cudaMalloc(&reduce_scratch_, sizeof(double) * kReduceSlots));
  CUDA_CHECK(cudaMallocHost(&host_result_, sizeof(double) * 2));
}

CudaContext& CudaContext::current() {
  static std::mutex mu;
  static CudaContext* table[kMaxDevices] = {};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  WEFT_CHECK(device >= 0 && device < kMaxDevices,
             "CudaContext: device index " + std::to_string(device) + " out of range");
  std::lock_guard<std::mutex> lock(mu);
  if (!table[device]) table[device] = new CudaContext(device);
  return *table[device];
}

void CudaContext::sync_and_check(const char* op) {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  uint32_t word = 0;
  CUDA_CHECK(cudaMemcpy(&word, error_word_, sizeof(word), cudaMemcpyDeviceToHost));
  if (word == 0) return;
  CUDA_CHECK(cudaMemset(error_word_, 0, sizeof(word)));
  std::string what;
  if (word & kTokenOutOfRange) what += " an embedding token outside the vocabulary;";
  if (word & kTargetOutOfRange) what += " a cross-entropy target outside the vocabulary;";
  fatal(__FILE__, __LINE__,
        std::string(op) + ": a CUDA kernel found bad input since the last check:" + what +
            " (run the CPU backend on the same batch for the exact position)");
}

int device_count(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = cudaGetErrorString(e);
    (void)cudaGetLastError();
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount returned 0";
  return n;
}

std::string use_device(int device) {
  CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

void* compute_stream() { return CudaContext::current().compute_stream(); }

std::shared_ptr<void> record_event() {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreate(&e));
  CUDA_CHECK(cudaEventRecord(e, CudaContext::current().compute_stream()));
  return std::shared_ptr<void>(e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
}

double seconds_since(const std::shared_ptr<void>& start, const std::shared_ptr<void>& end) {
  auto* a = static_cast<cudaEvent_t>(start.get());
  auto* b = static_cast<cudaEvent_t>(end.get());
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms / 1000.0;
}

}  // namespace weft::cuda
