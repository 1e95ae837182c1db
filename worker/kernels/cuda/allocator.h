// weft caching device allocator: steady-state training steps do no cudaMalloc.
//
// Blocks are rounded up to a size class and, when freed, kept on a per-class
// free list of their device instead of being returned to the driver; the next
// request of that class reuses one. Size classes: multiples of 512 B up to
// 1 MiB, then 1/8-power-of-two steps (at most 12.5% waste), so a class is
// exact-fit and lists never need splitting or coalescing.
//
// Invariants:
//  - every pointer handed out is 256-byte aligned (cudaMalloc's guarantee),
//    and in the live map until free() takes it back;
//  - free() is stream-ordered with respect to the compute stream of the
//    block's device only: a block used by another stream (NCCL's comm stream)
//    must have that work ordered before later compute-stream work (an event
//    wait) before it is freed. This is the same contract as PyTorch's
//    allocator without record_stream;
//  - bytes_held = bytes in use + bytes cached; both are exact.
// Thread-safe (one mutex; allocation is not on any hot inner loop).
#pragma once

#include <cstddef>
#include <cstdint>

namespace weft::cuda {

struct AllocatorStats {
  size_t bytes_held = 0;      // obtained from cudaMalloc and not yet cudaFree'd
  size_t bytes_in_use = 0;    // handed out and not yet freed (size-class rounded)
  size_t peak_bytes_held = 0;    // highs of the two above since the process started
  size_t peak_bytes_in_use = 0;  // (held - in use at the peak = the cache's overhead)
  uint64_t cuda_mallocs = 0;  // cudaMalloc calls so far (steady state: constant)
  uint64_t cache_hits = 0;
};

// The allocation size class of a request (exposed for tests).
size_t size_class(size_t bytes);

// Allocates on the current device. Aborts with the request size and the
// allocator's stats if the device is out of memory even after emptying the cache.
void* device_alloc(size_t bytes);
// Returns a block to its free list. nullptr is ignored; an unknown pointer aborts.
void device_free(void* ptr);
// cudaFree's every cached block (after a device synchronize).
void empty_cache();
AllocatorStats allocator_stats();
// Restarts the peaks from the current bytes held and in use.
void reset_peak_stats();
// Bytes of the current device in use by anything (cudaMemGetInfo: total -
// free): this allocator's, the CUDA context's, libraries' workspaces, other
// processes'.
size_t device_used_bytes();

// Routes Buffer's CUDA allocations (tensor/tensor.cc) through this allocator.
// Must be called before the first CUDA Buffer is created (it aborts otherwise),
// because a block from plain cudaMalloc must never reach device_free.
// Idempotent.
void install_buffer_allocator();

}  // namespace weft::cuda
