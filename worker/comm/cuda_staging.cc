#include "comm/cuda_staging.h"

#include <string>

#include <cuda_runtime.h>

namespace weft::comm {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw CommError(std::string("host-staged collective: ") + what + ": " + cudaGetErrorString(e));
}

struct CudaFence : StagingDevice::Fence {
  // Blocking: a Gloo lane waits on a copy's fence for as long as the GPU is
  // behind (a whole backward), and ranks sharing a host share its cores; a
  // spinning wait would take one from each of them.
  CudaFence() {
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventBlockingSync), "cudaEventCreate");
  }
  ~CudaFence() override { cudaEventDestroy(event); }
  cudaEvent_t event = nullptr;
};

cudaEvent_t event_of(const StagingDevice::FencePtr& f) { return static_cast<CudaFence&>(*f).event; }

class CudaStaging : public StagingDevice {
 public:
  explicit CudaStaging(cudaStream_t compute) : compute_(compute) {
    check(cudaGetDevice(&device_), "cudaGetDevice");
    check(cudaStreamCreateWithFlags(&to_host_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&to_device_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaStaging() override {
    cudaStreamSynchronize(to_host_);
    cudaStreamSynchronize(to_device_);
    cudaStreamDestroy(to_host_);
    cudaStreamDestroy(to_device_);
  }

  std::shared_ptr<char> host_buffer(size_t bytes) override {
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc");
    return std::shared_ptr<char>(static_cast<char*>(p), [](char* q) { cudaFreeHost(q); });
  }

  FencePtr to_host(const std::vector<Copy>& copies, const std::vector<FencePtr>& after) override {
    auto issued = std::make_shared<CudaFence>();
    check(cudaEventRecord(issued->event, compute_), "cudaEventRecord");
    check(cudaStreamWaitEvent(to_host_, issued->event, 0), "cudaStreamWaitEvent");
    for (const FencePtr& f : after) check(cudaStreamWaitEvent(to_host_, event_of(f), 0), "cudaStreamWaitEvent");
    return copy(copies, cudaMemcpyDeviceToHost, to_host_);
  }

  void wait(const FencePtr& f) override {
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaEventSynchronize(event_of(f)), "cudaEventSynchronize (copy to host)");
  }

  FencePtr to_device(const std::vector<Copy>& copies) override {
    check(cudaSetDevice(device_), "cudaSetDevice");
    return copy(copies, cudaMemcpyHostToDevice, to_device_);
  }

  void compute_waits(const FencePtr& f) override {
    check(cudaStreamWaitEvent(compute_, event_of(f), 0), "cudaStreamWaitEvent");
  }

  // A failed copy (or any earlier error of the device) is reported, not
  // taken for a copy still running: that would keep its slot forever.
  bool done(const FencePtr& f) override {
    const cudaError_t e = cudaEventQuery(event_of(f));
    if (e == cudaErrorNotReady) return false;
    check(e, "cudaEventQuery (staged copy)");
    return true;
  }

 private:
  FencePtr copy(const std::vector<Copy>& copies, cudaMemcpyKind kind, cudaStream_t stream) {
    for (const Copy& c : copies) check(cudaMemcpyAsync(c.dst, c.src, c.bytes, kind, stream), "cudaMemcpyAsync");
    auto f = std::make_shared<CudaFence>();
    check(cudaEventRecord(f->event, stream), "cudaEventRecord");
    return f;
  }

  int device_ = 0;
  cudaStream_t compute_;
  cudaStream_t to_host_ = nullptr, to_device_ = nullptr;
};

}  // namespace

std::shared_ptr<StagingDevice> make_cuda_staging(void* compute_stream) {
  return std::make_shared<CudaStaging>(static_cast<cudaStream_t>(compute_stream));
}

}  // namespace weft::comm
