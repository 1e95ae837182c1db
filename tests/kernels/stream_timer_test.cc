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

// StreamWaits sums the waits of a step and hands the sum over once; on the
// CPU each wait is the calling thread's time in it.
TEST(StreamWaits, CpuSumsTheWaitsUntilTaken) {
  StreamWaits w(Device::CPU);
  int calls = 0;
  for (int i = 0; i < 2; ++i)
    w.time([&] {
      ++calls;
      std::this_thread::sleep_for(std::chrono::milliseconds(15));
    });
  EXPECT_EQ(calls, 2);
  const double sum = w.take_seconds();
  EXPECT_GE(sum, 0.03);
  EXPECT_EQ(w.take_seconds(), 0) << "taking empties it";
  w.time([] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); });
  w.clear();
  EXPECT_EQ(w.take_seconds(), 0) << "clear forgets what was timed";
}

}  // namespace
}  // namespace weft::ops
