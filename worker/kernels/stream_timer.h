// Time as the compute stream sees it, for the overlap accounting
// (docs/metrics.md, "Overlap"): how long compute waited for communication.
// On the CPU the ops run on the calling thread, so that is host time. On a GPU
// the ops only enqueue work and Work::wait() makes the stream, not the host,
// wait: the interval is measured between two CUDA events recorded on the
// compute stream, and stop() blocks until the stream has reached the second.
#pragma once

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace weft::ops {

class StreamTimer {
 public:
  // Marks the start: now on the host, or an event recorded on the calling
  // thread's compute stream.
  explicit StreamTimer(Device device);
  // Seconds from the start to now on the same timeline; on a GPU records the
  // end event and waits for it. On the CPU the interval is a wait of this
  // thread: host_wait_seconds_of_this_thread() grows by it. Call once.
  double stop();

 private:
  Device device_;
  std::chrono::steady_clock::time_point host_start_;
  std::shared_ptr<void> start_event_;  // cudaEvent_t, destroyed with the timer
};

// The time compute waited, summed over many waits of a step and read once:
// the waits of ZeRO and ISP that happen in the middle of forward and backward,
// where blocking the host per wait (as StreamTimer::stop does) would serialise
// it with the GPU. On the CPU each interval is host time, added as it ends. On
// a GPU time() records an event on the compute stream before and after the
// wait and nothing blocks; take_seconds() waits for the last event and sums
// the intervals, which is how long the stream stood still for communication.
// Host seconds the calling thread has spent in StreamWaits::time() and
// StreamTimer intervals on the CPU since it started; monotonic. The trainer reads it around its compute phases
// (forward, backward, optimizer) and takes the waits inside a phase out of it,
// since those waits are the strategy's exposed communication
// (StepCommStats::exposed_seconds), a phase of their own. Per thread because
// ranks may be threads of one process (tests/overlap). On a GPU a wait does
// not block the host, so the host-timed phases hold none and this stays put.
double host_wait_seconds_of_this_thread();

class StreamWaits {
 public:
  explicit StreamWaits(Device device) : device_(device) {}

  // Runs wait() (a Work::wait(), or a whole synchronous exchange) and times it.
  template <class F>
  void time(F&& wait) {
    begin();
    wait();
    end();
  }
  // Seconds of the intervals timed since the last take or clear, then empty.
  double take_seconds();
  // Forgets the intervals timed so far without reading them (no sync).
  void clear();

 private:
  void begin();
  void end();

  Device device_;
  double host_seconds_ = 0;
  std::chrono::steady_clock::time_point host_start_;
  std::shared_ptr<void> start_event_;
  std::vector<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>> intervals_;  // cudaEvent_t pairs
};

}  // namespace weft::ops
