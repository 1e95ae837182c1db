// weft CUDA context: what every CUDA kernel of one device runs with.
//
// Owns, per device: the compute stream, the cuBLASLt handle and its workspace,
// a device error word that kernels set when they find bad input (a token or
// target outside the vocabulary) and small reduction scratch.
//
// One context per device, created lazily by CudaContext::current() on first
// use from the current device and never destroyed (static destruction order
// against the CUDA runtime's own teardown is unspecified). This is the one
// process-wide table in the CUDA backend: ops.h has no context argument, so
// the dispatch reaches the stream through it. Code that needs to order other
// streams (NCCL) against compute takes compute_stream() from here.
//
// The compute stream is a blocking stream (cudaStreamCreate), so the legacy
// default stream used by Buffer's cudaMemset is ordered with it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

namespace weft::cuda {

// Codes kernels OR into the device error word.
enum DeviceError : uint32_t {
  kTokenOutOfRange = 1u << 0,   // embedding: token outside [0, V)
  kTargetOutOfRange = 1u << 1,  // cross-entropy: target outside [0, V)
};

class CudaContext {
 public:
  // The context of the current device (cudaGetDevice), created on first use.
  static CudaContext& current();

  int device() const { return device_; }
  cudaStream_t compute_stream() const { return stream_; }
  cublasLtHandle_t lt() const { return lt_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

  // Device pointer to the error word (uint32 bit set of DeviceError).
  uint32_t* error_word() const { return error_word_; }
  // Device scratch of kReduceSlots doubles for two-pass deterministic reductions.
  static constexpr int kReduceSlots = 1024;
  double* reduce_scratch() const { return reduce_scratch_; }
  // Pinned host double for reduction results.
  double* host_result() const { return host_result_; }

  // Synchronises the compute stream, then aborts naming `op` if any kernel
  // set the error word since the last check (which it clears).
  void sync_and_check(const char* op);

  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

 private:
  explicit CudaContext(int device);
  int device_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  uint32_t* error_word_ = nullptr;
  double* reduce_scratch_ = nullptr;
  double* host_result_ = nullptr;
};

// Number of visible CUDA devices; 0 (not an abort) when there is no driver or
// no device, so tests can skip. `why` receives the runtime's message.
int device_count(std::string* why = nullptr);
// cudaSetDevice for the calling thread; returns the device's name.
std::string use_device(int device);
// CudaContext::current().compute_stream() as an opaque pointer, for callers
// compiled without the CUDA headers (ops::cuda_compute_stream).
void* compute_stream();
// An event recorded now on the current compute stream (ops::StreamTimer),
// destroyed with the last reference; seconds_since waits for `end`.
std::shared_ptr<void> record_event();
double seconds_since(const std::shared_ptr<void>& start, const std::shared_ptr<void>& end);

}  // namespace weft::cuda
