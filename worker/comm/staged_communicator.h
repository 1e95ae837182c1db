// weft comm: collectives of CUDA tensors over Gloo, staged through host
// memory (comm.backend: gloo with device: cuda).
//
// Why: NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), and some
// machines have no GPU network at all: a workstation with one GPU training
// with several ranks, a cluster whose GPUs talk only over TCP. There each
// collective of a device buffer travels through pinned host memory and Gloo.
//
// Ordering is the NCCL backend's (comm/nccl_communicator.h), by events, so
// neither the caller nor the compute stream blocks early:
//  1. at issue (caller's thread) the copy stream waits for the compute
//     stream's work so far and copies every input device -> host (with
//     nothing to copy, a broadcast's receivers, it still records that point,
//     so the copy back cannot land under a kernel queued before the call);
//  2. the collective's Gloo lane waits for that copy (its start time comes
//     after it: staging is not communication time), runs the collective on
//     the host buffers, then queues the output's copy host -> device on the
//     copy-back stream;
//  3. Work::wait() waits for the host collective (the host blocks here, the
//     one difference from NCCL: the copy back is queued only once the data
//     arrived) and makes the compute stream wait for the copy back.
// Lanes and the express lane are Gloo's. The overlap rule holds for device
// memory too: a collective whose buffers overlap the output of one still in
// flight copies to host only after that one's copy back (the caller's thread
// waits for the earlier collective's data to arrive, then the copy stream
// waits for its copy back), as NCCL's FIFO stream would order them. A host
// tensor passes straight through to Gloo. Buffers that alias (an in-place
// all-gather or reduce-scatter share) alias in host memory too.
//
// Host buffers come from a grow-only pool: a buffer is reused once the
// collective that held it has finished and its copy back has landed.
// StagingDevice is the device side (cuda_staging.h on a GPU; a test puts
// plain host memory behind it, so the plan and the pool are tested on CPU).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/gloo_communicator.h"

namespace weft::comm {

// The device side of staging: where device buffers go to host memory and back.
class StagingDevice {
 public:
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  // A point in a stream's work: done once the copies before it finished.
  struct Fence {
    virtual ~Fence() = default;
  };
  using FencePtr = std::shared_ptr<Fence>;

  virtual ~StagingDevice() = default;
  // Host memory the device copies to and from (pinned on a GPU).
  virtual std::shared_ptr<char> host_buffer(size_t bytes) = 0;
  // Caller's thread: device -> host copies ordered after the work the
  // compute stream has been given so far and after the fences in `after`
  // (earlier collectives' copies back into the same memory). Never blocks.
  virtual FencePtr to_host(const std::vector<Copy>& copies, const std::vector<FencePtr>& after) = 0;
  // A lane's thread: blocks until `f` is done.
  virtual void wait(const FencePtr& f) = 0;
  // A lane's thread: host -> device copies; never blocks.
  virtual FencePtr to_device(const std::vector<Copy>& copies) = 0;
  // Caller's thread: the compute stream waits for `f` (the host does not).
  virtual void compute_waits(const FencePtr& f) = 0;
  virtual bool done(const FencePtr& f) = 0;
};

// Host buffers reused across collectives. take() returns a buffer of at
// least `bytes` that no unfinished collective holds, giving it to `owner`.
class StagingPool {
 public:
  struct Owner {
    virtual ~Owner() = default;
    virtual bool finished() = 0;
  };
  explicit StagingPool(std::shared_ptr<StagingDevice> device) : device_(std::move(device)) {}
  char* take(size_t bytes, const std::shared_ptr<Owner>& owner);
  size_t buffers() const;     // allocated so far
  size_t bytes_held() const;  // their total size

 private:
  struct Slot {
    std::shared_ptr<char> mem;
    size_t bytes = 0;
    std::shared_ptr<Owner> owner;
  };
  std::shared_ptr<StagingDevice> device_;
  mutable std::mutex mu_;
  std::vector<Slot> slots_;
};

// Where each device buffer of one collective lives in host memory: `bytes`
// of host memory in all, the input at `input_at` and the output at
// `output_at`. An output inside the input (reduce-scatter in place) or an
// input inside the output (all-gather in place) keeps the same offset in
// host memory; otherwise the two follow each other. One-buffer collectives
// (all-reduce, broadcast) have output == input.
struct StagingPlan {
  size_t bytes = 0;
  size_t input_at = 0;
  size_t output_at = 0;
};
StagingPlan plan_staging(const void* input, size_t input_bytes, const void* output, size_t output_bytes);

class StagedCommunicator : public Communicator {
 public:
  StagedCommunicator(std::shared_ptr<GlooCommunicator> host, std::shared_ptr<StagingDevice> device);

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }
  const std::vector<int>& members() const override { return host_->members(); }

  WorkPtr all_reduce(const Tensor& data, ReduceOp op, const std::string& label = "") override;
  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op,
                         const std::vector<int64_t>& counts = {},
                         const std::string& label = "") override;
  WorkPtr all_gather(const Tensor& input, const Tensor& output,
                     const std::vector<int64_t>& counts = {},
                     const std::string& label = "") override;
  WorkPtr all_to_all(const Tensor& input, const Tensor& output,
                     const std::vector<int64_t>& send_counts = {},
                     const std::vector<int64_t>& recv_counts = {},
                     const std::string& label = "") override;
  WorkPtr broadcast(const Tensor& data, int root, const std::string& label = "") override;
  WorkPtr barrier(const std::string& label = "") override { return host_->barrier(label); }

  CommStats stats() const override;
  const StagingPool& pool() const { return pool_; }

  struct Op;  // one staged collective's state

 private:
  // Stages `input` (copied to host before the collective, unless
  // `copy_input` is false) and `output` (copied back after), then issues
  // `issue(host_input, host_output)` on the Gloo communicator.
  template <typename Issue>
  WorkPtr staged(const Tensor& input, const Tensor& output, bool copy_input, Issue&& issue);

  // Declared before host_, so destroyed after it: the Gloo communicator's
  // destructor runs the collectives still queued, which use the pool's host
  // memory and the device's streams.
  std::shared_ptr<StagingDevice> device_;
  StagingPool pool_;
  std::shared_ptr<GlooCommunicator> host_;
  std::vector<std::shared_ptr<Op>> in_flight_;  // issued, not yet known to be finished
  std::atomic<uint64_t> staged_count_{0}, staged_bytes_{0};  // CommStats::staged
};

}  // namespace weft::comm
