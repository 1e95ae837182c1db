// Time as the compute stream sees it, for the overlap accounting
// (docs/metrics.md, "Overlap"): how long compute waited for communication.
// On the CPU the ops run on the calling thread, so that is host time. On a GPU
// the ops only enqueue work and Work::wait() makes the stream, not the host,
// wait: the interval is measured between two CUDA events recorded on the
// compute stream, and stop() blocks until the stream has reached the second.
#pragma once

#include <chrono>
#include <memory>

#include "tensor/tensor.h"

namespace weft::ops {

class StreamTimer {
 public:
  // Marks the start: now on the host, or an event recorded on the calling
  // thread's compute stream.
  explicit StreamTimer(Device device);
  // Seconds from the start to now on the same timeline; on a GPU records the
  // end event and waits for it.
  double stop();

 private:
  Device device_;
  std::chrono::steady_clock::time_point host_start_;
  std::shared_ptr<void> start_event_;  // cudaEvent_t, destroyed with the timer
};

}  // namespace weft::ops
