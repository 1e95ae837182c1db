// Caching allocator: size classes and steady-state reuse (no new cudaMalloc).
#ifdef WEFT_HAVE_CUDA

#include "kernels/cuda/allocator.h"

#include <gtest/gtest.h>

#include <vector>

#include "gpu/gpu_test_util.h"

namespace weft::cuda {
namespace {

TEST(CudaAllocator, SizeClassesCoverRequestWithBoundedWaste) {
  // Host-only arithmetic: runs without a GPU.
  for (size_t bytes : {size_t{1}, size_t{511}, size_t{512}, size_t{513}, size_t{1} << 20,
                       (size_t{1} << 20) + 1, size_t{3} << 21, (size_t{5} << 27) + 7}) {
    const size_t c = size_class(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_EQ(c % 512, 0u) << bytes;
    if (bytes > 4096) {
      EXPECT_LE(c - bytes, bytes / 8 + 512) << bytes;
    }
    EXPECT_EQ(size_class(c), c) << "a class must map to itself: " << bytes;
  }
}

TEST(CudaAllocator, SteadyStateDoesNoCudaMalloc) {
  WEFT_REQUIRE_GPU();
  const std::vector<size_t> sizes = {100, 4096, 1 << 20, (3 << 20) + 5, 777777};
  auto round = [&] {
    std::vector<void*> ptrs;
    for (size_t s : sizes) ptrs.push_back(device_alloc(s));
    for (void* p : ptrs) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
      device_free(p);
    }
  };
  const AllocatorStats before = allocator_stats();
  round();
  const AllocatorStats warm = allocator_stats();
  round();
  round();
  const AllocatorStats after = allocator_stats();
  EXPECT_EQ(after.cuda_mallocs, warm.cuda_mallocs) << "second round must reuse cached blocks";
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.bytes_held, warm.bytes_held);
  EXPECT_GE(after.cache_hits, warm.cache_hits + 2 * sizes.size());
}

TEST(CudaAllocator, BuffersGoThroughTheCache) {
  WEFT_REQUIRE_GPU();
  const AllocatorStats before = allocator_stats();
  { OwnedTensor t(DType::F32, Shape{1000}, Device::CUDA); }
  const AllocatorStats mid = allocator_stats();
  EXPECT_EQ(mid.bytes_in_use, before.bytes_in_use);
  { OwnedTensor t(DType::F32, Shape{1000}, Device::CUDA); }
  EXPECT_EQ(allocator_stats().cuda_mallocs, mid.cuda_mallocs);
  EXPECT_GT(mid.bytes_held, 0u);
}

TEST(CudaAllocator, PeaksFollowTheHighsAndRestartFromNow) {
  WEFT_REQUIRE_GPU();
  empty_cache();
  reset_peak_stats();
  const AllocatorStats base = allocator_stats();
  EXPECT_EQ(base.peak_bytes_held, base.bytes_held);
  EXPECT_EQ(base.peak_bytes_in_use, base.bytes_in_use);
  void* big = device_alloc(size_t{64} << 20);
  void* small = device_alloc(size_t{1} << 20);
  device_free(big);
  const AllocatorStats high = allocator_stats();
  EXPECT_EQ(high.peak_bytes_in_use, base.bytes_in_use + (size_t{65} << 20));
  EXPECT_EQ(high.bytes_in_use, base.bytes_in_use + (size_t{1} << 20));
  EXPECT_EQ(high.peak_bytes_held, high.bytes_held) << "the freed block is still cached";
  device_free(small);
  empty_cache();
  reset_peak_stats();
  const AllocatorStats after = allocator_stats();
  EXPECT_EQ(after.bytes_held, base.bytes_held) << "empty_cache returns every cached block";
  EXPECT_EQ(after.peak_bytes_held, base.bytes_held);
  EXPECT_EQ(after.peak_bytes_in_use, base.bytes_in_use);
}

}  // namespace
}  // namespace weft::cuda

#else
#include <gtest/gtest.h>
TEST(CudaAllocator, NotBuilt) { GTEST_SKIP() << "no CUDA device: weft was built without nvcc"; }
#endif
