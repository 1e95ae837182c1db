#include "kernels/stream_timer.h"

#include <gtest/gtest.h>

#include <thread>

namespace weft::ops {
namespace {

// On the CPU the compute stream is the calling thread: the timer measures
// what that thread spent between start and stop, here a wait.
TEST(StreamTimer, CpuMeasuresTheCallingThreadsTime) {
  StreamTimer t(Device::CPU);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double s = t.stop();
  EXPECT_GE(s, 0.02);
  EXPECT_GE(t.stop(), s) << "stop reads the time since the same start";
}

}  // namespace
}  // namespace weft::ops
