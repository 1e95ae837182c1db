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

namespace {
thread_local double host_wait_seconds = 0;
}  // namespace

double StreamTimer::stop() {
  if (device_ == Device::CPU) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start_).count();
    host_wait_seconds += waited;
    return waited;
  }
#ifdef WEFT_HAVE_CUDA
  return cuda::seconds_since(start_event_, cuda::record_event());
#else
  return 0;
#endif
}

double host_wait_seconds_of_this_thread() { return host_wait_seconds; }

void StreamWaits::begin() {
  if (device_ == Device::CPU) {
    host_start_ = std::chrono::steady_clock::now();
    return;
  }
#ifdef WEFT_HAVE_CUDA
  start_event_ = cuda::record_event();
#else
  WEFT_CHECK(false, "StreamWaits: CUDA device, but weft was built without CUDA");
#endif
}

void StreamWaits::end() {
  if (device_ == Device::CPU) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start_).count();
    host_seconds_ += waited;
    host_wait_seconds += waited;
    return;
  }
#ifdef WEFT_HAVE_CUDA
  intervals_.emplace_back(std::move(start_event_), cuda::record_event());
#endif
}

double StreamWaits::take_seconds() {
  double s = host_seconds_;
#ifdef WEFT_HAVE_CUDA
  // The last end event completes after every earlier one (one stream).
  for (const auto& [start, stop] : intervals_) s += cuda::seconds_since(start, stop);
#endif
  clear();
  return s;
}

void StreamWaits::clear() {
  host_seconds_ = 0;
  intervals_.clear();
}

}  // namespace weft::ops
