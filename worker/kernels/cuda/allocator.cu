// Caching allocator: exact-fit size classes, so reuse is a list pop and the
// cache can never fragment into unusable pieces. Why not cudaMallocAsync pools:
// their release threshold and stats are per pool and opaque to
// weft_memory_bytes, and this keeps the contract identical to the CPU path.
#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/cuda_check.h"
#include "tensor/tensor.h"

namespace weft::cuda {
namespace {

struct Block {
  size_t bytes;  // size class
  int device;
};

struct State {
  std::mutex mu;
  std::unordered_map<void*, Block> live;
  // (device, size class) -> cached blocks.
  std::map<std::pair<int, size_t>, std::vector<void*>> free_lists;
  AllocatorStats stats;
};

State& state() {
  // Never destroyed: blocks may be freed by static destructors after main.
  static State* s = new State();
  return *s;
}

// Frees every cached block; caller holds the lock.
void release_cached(State& s) {
  for (auto& [key, ptrs] : s.free_lists) {
    for (void* p : ptrs) {
      CUDA_CHECK(cudaFree(p));
      s.stats.bytes_held -= key.second;
    }
    ptrs.clear();
  }
}

}  // namespace

size_t size_class(size_t bytes) {
  if (bytes == 0) bytes = 1;
  constexpr size_t kSmallStep = 512, kSmallMax = size_t{1} << 20;
  if (bytes <= kSmallMax) return (bytes + kSmallStep - 1) / kSmallStep * kSmallStep;
  size_t pow2 = kSmallMax;
  while (pow2 * 2 < bytes) pow2 *= 2;  // pow2 < bytes <= 2 * pow2
  const size_t step = pow2 / 8;
  return (bytes + step - 1) / step * step;
}

void* device_alloc(size_t bytes) {
  State& s = state();
  const size_t cls = size_class(bytes);
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(s.mu);
  auto& list = s.free_lists[{device, cls}];
  void* p = nullptr;
  if (!list.empty()) {
    p = list.back();
    list.pop_back();
    ++s.stats.cache_hits;
  } else {
    cudaError_t e = cudaMalloc(&p, cls);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the sticky-free OOM status before retrying
      CUDA_CHECK(cudaDeviceSynchronize());
      release_cached(s);
      e = cudaMalloc(&p, cls);
    }
    if (e != cudaSuccess) {
      std::fprintf(stderr,
                   "weft: fatal: device_alloc of %zu bytes (class %zu) on device %d failed: %s; "
                   "held %zu bytes, in use %zu bytes\n",
                   bytes, cls, device, cudaGetErrorString(e), s.stats.bytes_held,
                   s.stats.bytes_in_use);
      std::fflush(stderr);
      std::abort();
    }
    ++s.stats.cuda_mallocs;
    s.stats.bytes_held += cls;
    s.stats.peak_bytes_held = std::max(s.stats.peak_bytes_held, s.stats.bytes_held);
  }
  s.live.emplace(p, Block{cls, device});
  s.stats.bytes_in_use += cls;
  s.stats.peak_bytes_in_use = std::max(s.stats.peak_bytes_in_use, s.stats.bytes_in_use);
  return p;
}

void device_free(void* ptr) {
  if (!ptr) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.live.find(ptr);
  WEFT_CHECK(it != s.live.end(),
             "device_free: pointer was not allocated by the caching allocator (double free, or "
             "memory from plain cudaMalloc)");
  const Block b = it->second;
  s.live.erase(it);
  s.stats.bytes_in_use -= b.bytes;
  s.free_lists[{b.device, b.bytes}].push_back(ptr);
}

void empty_cache() {
  State& s = state();
  CUDA_CHECK(cudaDeviceSynchronize());
  std::lock_guard<std::mutex> lock(s.mu);
  release_cached(s);
}

void reset_peak_stats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.stats.peak_bytes_held = s.stats.bytes_held;
  s.stats.peak_bytes_in_use = s.stats.bytes_in_use;
}

size_t device_used_bytes() {
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return total - free;
}

AllocatorStats allocator_stats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.stats;
}

void install_buffer_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    WEFT_CHECK(set_cuda_buffer_allocator(&device_alloc, &device_free),
               "install_buffer_allocator: CUDA buffers already exist; install the caching "
               "allocator before creating any CUDA Buffer");
  });
}

}  // namespace weft::cuda
