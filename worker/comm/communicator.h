// weft comm: the Communicator interface every parallel strategy talks to, and
// the Work handle an asynchronous collective returns. Backends: Gloo (CPU,
// comm/gloo_communicator.h) and NCCL (CUDA, comm/nccl_communicator.h).
//
// Invariants every backend keeps:
//  - Every rank of the group must issue the same collectives in the same
//    order. NCCL runs them in that order on a dedicated comm stream; Gloo on
//    one or more lanes (comm.lanes, gloo_communicator.h), each a FIFO thread,
//    so independent collectives overlap, while one that touches memory an
//    earlier one still in flight touches waits for it. Completion order is
//    not issue order in general: wait on each Work whose result you use.
//  - Buffers are flat, contiguous Tensor views (F32 or BF16). The caller keeps
//    them alive and does not touch them until the Work completes.
//  - Every collective has a deadline (CommContext::timeout). A missed deadline
//    or a lost peer never returns an error to the caller: the process logs
//    "weft: collective timeout/peer lost: ..." and exits with code 3
//    (kExitPeerLost), unless the context's policy is FailurePolicy::Throw.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/tensor.h"
#include "weft_contract.h"

namespace weft::comm {

// Exit codes: comm's names for the worker/operator contract
// (contract/weft_contract.h), which defines them.
constexpr int kExitOk = contract::kExitDone;
constexpr int kExitBadConfig = contract::kExitBadConfig;
constexpr int kExitPeerLost = contract::kExitPeerLost;
constexpr int kExitCheckpointIo = contract::kExitCheckpointIo;
constexpr int kExitSigterm = contract::kExitPreempted;

// Thrown for misuse (shape/dtype/count mismatch) and, under
// FailurePolicy::Throw, for failed collectives.
struct CommError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class ReduceOp : uint8_t { Sum, Avg };
const char* reduce_op_name(ReduceOp op);

enum class OpKind : uint8_t { AllReduce, ReduceScatter, AllGather, AllToAll, Broadcast, Barrier };
const char* op_name(OpKind op);  // "all_reduce", "reduce_scatter", ...

// Handle to one asynchronous collective.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective finished. For NCCL: makes the compute stream
  // wait on the comm stream (the host does not block) so later kernels see
  // the result. Throws CommError only under FailurePolicy::Throw.
  virtual void wait() = 0;
  // True once the result is in the output buffer; never blocks.
  virtual bool completed() = 0;
  // Time the collective actually ran (comm thread clock / comm stream
  // events); 0 until completed.
  virtual double comm_seconds() = 0;
  // Time from issue until the comm thread/stream started it (queueing behind
  // earlier collectives of the same Gloo lane or NCCL stream, or waiting for
  // an earlier overlapping one on another lane); 0 until started.
  virtual double enqueue_to_start_seconds() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

// Cumulative per-operation totals, read by the metrics unit
// (weft_comm_seconds_total{op,group}, weft_comm_bytes_total{op,group}).
struct CommOpStats {
  uint64_t count = 0;
  double seconds = 0;  // as Work::comm_seconds
  uint64_t bytes = 0;  // bytes of this rank's input buffer
};
struct CommStats {
  std::map<std::string, CommOpStats> by_op;  // key: op_name()
  // Collectives of device memory that went through host memory
  // (StagedCommunicator): their count and the bytes copied to the host and
  // back; zero for every other backend.
  CommOpStats staged;
};

// A group of ranks that run collectives together. Ranks are group-local
// (0..size()-1); members() maps them to global ranks.
//
// Counts: an empty `counts` means an equal split (the full buffer's length
// must divide by size()); otherwise counts[r] is rank r's share in elements
// and the shares sum to the full buffer's length. `label` names what the
// caller is syncing (e.g. "bucket 3") in failure messages.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;            // "world", "dp", "sp", "wp", "wdp"
  virtual const std::vector<int>& members() const = 0;    // global ranks, group order

  // In place: every rank ends with the reduction of all ranks' `data`.
  virtual WorkPtr all_reduce(const Tensor& data, ReduceOp op, const std::string& label = "") = 0;
  // `input` holds the full buffer; `output` receives this rank's reduced
  // share (counts[rank()] elements, in rank order). `input` is not modified;
  // `output` may alias this rank's share inside `input`.
  virtual WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op,
                                 const std::vector<int64_t>& counts = {},
                                 const std::string& label = "") = 0;
  // `input` is this rank's share; `output` the concatenation in rank order.
  // `input` may alias this rank's share inside `output`.
  virtual WorkPtr all_gather(const Tensor& input, const Tensor& output,
                             const std::vector<int64_t>& counts = {},
                             const std::string& label = "") = 0;
  // Rank r's send_counts[j] elements (consecutive in `input`, j ascending)
  // go to rank j, where they land at j's recv offset for r. Empty counts:
  // equal split of `input` and `output`, which must have equal lengths.
  virtual WorkPtr all_to_all(const Tensor& input, const Tensor& output,
                             const std::vector<int64_t>& send_counts = {},
                             const std::vector<int64_t>& recv_counts = {},
                             const std::string& label = "") = 0;
  // Group rank `root`'s `data` is copied to every rank's `data`.
  virtual WorkPtr broadcast(const Tensor& data, int root, const std::string& label = "") = 0;
  virtual WorkPtr barrier(const std::string& label = "") = 0;

  virtual CommStats stats() const = 0;
};
using CommunicatorPtr = std::shared_ptr<Communicator>;

// Thread-safe accumulator the backends use to implement stats().
class StatsRecorder {
 public:
  void add(OpKind op, double seconds, uint64_t bytes);
  CommStats snapshot() const;

 private:
  mutable std::mutex mu_;
  CommStats stats_;
};

// Validation helpers shared by the backends; throw CommError naming the
// group, op and what is wrong.
std::vector<int64_t> split_counts(const std::string& group, OpKind op, int64_t total, int size,
                                  const std::vector<int64_t>& counts);
void check_buffer(const std::string& group, OpKind op, const char* which, const Tensor& t);
// check_buffer, and `t` in the memory the backend reads (`device`); `rule`
// says the backend's rule when it is not ("the NCCL backend needs CUDA tensors").
void check_buffer_on(const std::string& group, OpKind op, const char* which, const Tensor& t, Device device,
                     const char* rule);
// Address of element `elem` of a flat buffer, and the running offsets of
// per-rank counts (size + 1 entries, the last the total).
char* element_at(const Tensor& t, int64_t elem);
std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts);

}  // namespace weft::comm
