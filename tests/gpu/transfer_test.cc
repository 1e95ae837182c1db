// ops::transfer between host and GPU: host -> GPU -> GPU -> host returns the
// same bytes in every dtype; a transfer is ordered after kernels already
// launched on the compute stream and returns with the copy done (the host
// source may be overwritten at once, the host destination read at once).
#ifdef WEFT_HAVE_CUDA

#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "tensor/bf16.h"

namespace weft::gpu_test {
namespace {

TEST(CudaTransfer, RoundTripsEveryDtype) {
  WEFT_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16, DType::I32})
    for (int64_t n : {1, 1000, 300001}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n" + std::to_string(n));
      const size_t bytes = static_cast<size_t>(n) * dtype_size(dt);
      // Random bits of the right width: every pattern must survive, NaNs included.
      std::vector<unsigned char> src(bytes);
      const auto ints = random_tokens(bytes, 256, 60);
      for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>(ints[i]);
      std::vector<unsigned char> host = src, back(bytes, 0xAB);
      OwnedTensor g1(dt, {n}, Device::CUDA), g2(dt, {n}, Device::CUDA);
      ops::transfer(g1.t, Tensor(host.data(), dt, {n}));
      std::memset(host.data(), 0, bytes);  // the upload has finished with host
      ops::transfer(g2.t, g1.t);
      ops::transfer(Tensor(back.data(), dt, {n}), g2.t);
      EXPECT_EQ(back, src);  // readable without a sync: the download synchronised
    }
}

TEST(CudaTransfer, IsOrderedAfterEarlierKernels) {
  WEFT_REQUIRE_GPU();
  const int64_t n = 1 << 22;
  OwnedTensor g(DType::BF16, {n}, Device::CUDA);
  std::vector<uint16_t> back(n);
  for (float v : {1.5f, -3.0f}) {
    ops::fill(g.t, v);  // asynchronous; the transfer must wait for it
    ops::transfer(Tensor(back.data(), DType::BF16, {n}), g.t);
    for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(back[i], f32_to_bf16(v)) << i;
    ASSERT_EQ(back[n - 1], f32_to_bf16(v));
  }
}

TEST(CudaTransfer, RejectsMismatches) {
  WEFT_REQUIRE_GPU();
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  std::vector<float> host(8);
  EXPECT_DEATH(
      {
        OwnedTensor g(DType::BF16, {8}, Device::CUDA);
        ops::transfer(g.t, Tensor::f32(host.data(), {8}));
      },
      "transfer: dtypes differ: dst bf16, src f32");
}

}  // namespace
}  // namespace weft::gpu_test

#endif  // WEFT_HAVE_CUDA
