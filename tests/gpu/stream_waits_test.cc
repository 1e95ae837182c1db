// StreamWaits on a GPU: the waits are timed on the compute stream, without
// blocking the host. The "wait" here is work queued on the stream (a large
// f32 matmul, ~1 ms or more on any GPU), which the host only enqueues: the
// stream's interval must cover the work while the host returned at once.
#ifdef WEFT_HAVE_CUDA

#include <gtest/gtest.h>

#include <chrono>

#include "gpu/gpu_test_util.h"
#include "kernels/ops.h"
#include "kernels/stream_timer.h"

namespace weft::gpu_test {
namespace {

TEST(StreamWaitsGpu, TimesTheComputeStreamNotTheHost) {
  WEFT_REQUIRE_GPU();
  const int64_t n = 4096;
  OwnedTensor a = gpu_tensor(random_normal_f32(n * n, 70), DType::F32, {n, n});
  OwnedTensor c = gpu_empty(DType::F32, {n, n});
  ops::matmul(c.t, a, a, false, false);  // warm-up (cuBLASLt load, heuristics)
  download(c.t);
  ops::StreamWaits waits(Device::CUDA);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) waits.time([&] { ops::matmul(c.t, a, a, false, false); });
  const double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double stream = waits.take_seconds();  // blocks until the stream is through
  ops::StreamTimer whole(Device::CUDA);
  for (int i = 0; i < 4; ++i) ops::matmul(c.t, a, a, false, false);
  const double reference = whole.stop();
  EXPECT_GT(stream, 0.5 * reference) << "the intervals cover the queued work";
  EXPECT_LT(stream, 1.5 * reference);
  EXPECT_LT(host, 0.5 * stream) << "the host did not wait for the stream";
  EXPECT_EQ(waits.take_seconds(), 0);
}

}  // namespace
}  // namespace weft::gpu_test

#endif
