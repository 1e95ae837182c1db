#include "kernels/stream_timer.h"

#ifdef WEFT_HAVE_CUDA
#include "kernels/cuda/context.h"
#endif

namespace weft::ops {

StreamTimer::StreamTimer(Device device) : device_(device), host_start_(std::chrono::steady_clock::now()) {
  if (device_ == Device::CPU) return;
#ifdef WEFT_HAVE_CUDA
  start_event_ = cuda::record_event();
#else
  WEFT_CHECK(false, "StreamTimer: CUDA device, but weft was built without CUDA");
#endif
}

double StreamTimer::stop() {
  if (device_ == Device::CPU)
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start_).count();
#ifdef WEFT_HAVE_CUDA
  return cuda::seconds_since(start_event_, cuda::record_event());
#else
  return 0;
#endif
}

}  // namespace weft::ops
