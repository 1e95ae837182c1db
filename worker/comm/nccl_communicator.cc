#include "comm/nccl_communicator.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <cuda_runtime.h>
#include <nccl.h>

namespace weft::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Setup errors are thrown (the caller exits 1 or 3); errors of a running
// collective go through the watchdog policy instead.
#define WEFT_CUDA_CHECK(stmt)                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (stmt);                                                                    \
    if (e_ != cudaSuccess)                                                                      \
      throw CommError(std::string(#stmt) + ": " + cudaGetErrorString(e_) + " (" + __FILE__ +   \
                      ":" + std::to_string(__LINE__) + ")");                                    \
  } while (0)
#define WEFT_NCCL_CHECK(stmt)                                                                   \
  do {                                                                                          \
    ncclResult_t r_ = (stmt);                                                                   \
    if (r_ != ncclSuccess)                                                                      \
      throw CommError(std::string(#stmt) + ": " + ncclGetErrorString(r_) + " (" + __FILE__ +   \
                      ":" + std::to_string(__LINE__) + ")");                                    \
  } while (0)

ncclDataType_t nccl_type(DType t) { return t == DType::BF16 ? ncclBfloat16 : ncclFloat32; }
ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Avg ? ncclAvg : ncclSum; }

void check_cuda(const std::string& group, OpKind op, const char* which, const Tensor& t) {
  check_buffer_on(group, op, which, t, Device::CUDA, "the NCCL backend needs CUDA tensors");
}

double elapsed_seconds(cudaEvent_t a, cudaEvent_t b) {
  if (cudaEventQuery(b) != cudaSuccess) return 0.0;
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms / 1000.0;
}

}  // namespace

// One launched collective: its events and what its stats record says. Shared
// by the Work handle, the watchdog's poll and the communicator's pending list,
// so the stats are recorded exactly once whoever sees completion first, even
// after the caller dropped the Work.
struct NcclCommunicator::Op {
  Op(OpKind k, uint64_t b) : kind(k), bytes(b) {
    cudaEventCreate(&issued);
    cudaEventCreate(&start);
    cudaEventCreate(&end);
  }
  ~Op() {
    cudaEventDestroy(issued);
    cudaEventDestroy(start);
    cudaEventDestroy(end);
  }
  bool completed() const { return cudaEventQuery(end) == cudaSuccess; }
  // Adds this op to `stats` once it completed; true when it is (now or before) recorded.
  bool record_if_done(StatsRecorder& stats) {
    if (recorded.load()) return true;
    if (!completed()) return false;
    if (!recorded.exchange(true)) stats.add(kind, elapsed_seconds(start, end), bytes);
    return true;
  }

  const OpKind kind;
  const uint64_t bytes;
  cudaEvent_t issued, start, end;
  std::atomic<bool> recorded{false};
};

namespace {

class NcclWork : public Work {
 public:
  NcclWork(cudaStream_t compute, std::shared_ptr<NcclCommunicator::Op> op)
      : compute_(compute), op_(std::move(op)) {}
  void wait() override { cudaStreamWaitEvent(compute_, op_->end, 0); }
  bool completed() override { return op_->completed(); }
  double comm_seconds() override { return elapsed_seconds(op_->start, op_->end); }
  double enqueue_to_start_seconds() override { return elapsed_seconds(op_->issued, op_->start); }

 private:
  cudaStream_t compute_;
  std::shared_ptr<NcclCommunicator::Op> op_;
};

}  // namespace

std::shared_ptr<NcclCommunicator> NcclCommunicator::create(CommContext& ctx, TcpStore* store,
                                                           std::string name, std::vector<int> members,
                                                           int global_rank) {
  auto it = std::find(members.begin(), members.end(), global_rank);
  if (it == members.end())
    throw CommError("group " + name + ": rank " + std::to_string(global_rank) + " is not a member");
  int rank = static_cast<int>(it - members.begin());
  int size = static_cast<int>(members.size());
  ncclUniqueId id;
  if (rank == 0) WEFT_NCCL_CHECK(ncclGetUniqueId(&id));
  if (size > 1) {
    if (!store) throw CommError("group " + name + ": " + std::to_string(size) +
                                " ranks need a rendezvous store (MASTER_ADDR/MASTER_PORT)");
    std::string key = "nccl/" + name + "/";
    for (int m : members) key += std::to_string(m) + ",";
    if (rank == 0) {
      store->set(key, std::string(reinterpret_cast<const char*>(&id), sizeof id));
    } else {
      std::string v = store->get(key);
      if (v.size() != sizeof id) throw RendezvousError("group " + name + ": malformed NCCL unique id in the store");
      std::memcpy(&id, v.data(), sizeof id);
    }
  }
  // ncclCommInitRank blocks until every member joins; a member that never
  // comes would hang us, so the watchdog guards it with the rendezvous timeout.
  CommContext::Watch w;
  w.op = OpKind::Barrier;
  w.group = name;
  w.label = "ncclCommInitRank";
  w.deadline = Clock::now() + (store ? store->timeout() : ctx.timeout());
  uint64_t watch = ctx.watch(std::move(w));
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRank(&comm, size, id, rank);
  ctx.unwatch(watch);
  if (r != ncclSuccess)
    throw CommError("group " + name + ": ncclCommInitRank failed: " + ncclGetErrorString(r));
  return std::shared_ptr<NcclCommunicator>(
      new NcclCommunicator(ctx, std::move(name), std::move(members), rank, comm));
}

NcclCommunicator::NcclCommunicator(CommContext& ctx, std::string name, std::vector<int> members,
                                   int rank, ncclComm* comm)
    : ctx_(ctx), name_(std::move(name)), members_(std::move(members)), rank_(rank), comm_nccl_(comm) {
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
  WEFT_CUDA_CHECK(cudaMalloc(&barrier_buf_, sizeof(float)));
}

NcclCommunicator::~NcclCommunicator() {
  cudaStreamSynchronize(comm_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (uint64_t id : watches_) ctx_.unwatch(id);
  }
  ncclCommDestroy(comm_nccl_);
  cudaFree(barrier_buf_);
  cudaStreamDestroy(comm_);
}

template <typename Launch>
WorkPtr NcclCommunicator::launch(OpKind kind, const std::string& label, uint64_t bytes, Launch&& body) {
  auto op = std::make_shared<Op>(kind, bytes);
  WEFT_CUDA_CHECK(cudaEventRecord(op->issued, compute_));
  WEFT_CUDA_CHECK(cudaStreamWaitEvent(comm_, op->issued, 0));
  WEFT_CUDA_CHECK(cudaEventRecord(op->start, comm_));
  ncclResult_t r = body();
  if (r != ncclSuccess && r != ncclInProgress) {
    CommFailure f;
    f.op = kind;
    f.group = name_;
    f.label = label;
    f.detail = ncclGetErrorString(r);
    ncclCommAbort(comm_nccl_);
    throw CommError(ctx_.fail(f));
  }
  WEFT_CUDA_CHECK(cudaEventRecord(op->end, comm_));
  auto work = std::make_shared<NcclWork>(compute_, op);

  CommContext::Watch w;
  w.op = kind;
  w.group = name_;
  w.label = label;
  w.deadline = Clock::now() + ctx_.timeout();
  ncclComm_t comm = comm_nccl_;
  // Called by the watchdog thread: completion records the stats; an async
  // error (a peer died mid-collective) is a failure even before the deadline.
  auto id = std::make_shared<uint64_t>(0);
  w.poll = [this, op, kind, label, comm, id]() {
    if (op->record_if_done(stats_)) {
      std::lock_guard<std::mutex> lk(mu_);
      watches_.erase(*id);
      return true;
    }
    ncclResult_t err = ncclSuccess;
    ncclCommGetAsyncError(comm, &err);
    if (err != ncclSuccess && err != ncclInProgress) {
      CommFailure f;
      f.op = kind;
      f.group = name_;
      f.label = label;
      f.detail = std::string("NCCL async error: ") + ncclGetErrorString(err);
      ncclCommAbort(comm);
      ctx_.fail(f);
    }
    return false;
  };
  w.abort = [comm] { ncclCommAbort(comm); };
  std::lock_guard<std::mutex> lk(mu_);
  *id = ctx_.watch(std::move(w));
  watches_.insert(*id);
  std::erase_if(pending_, [](const std::shared_ptr<Op>& o) { return o->recorded.load(); });
  pending_.push_back(std::move(op));
  return work;
}

CommStats NcclCommunicator::stats() const {
  // The watchdog records completions on its own schedule; catch up here so a
  // reader sees every collective that has finished on the comm stream.
  std::lock_guard<std::mutex> lk(mu_);
  std::erase_if(pending_, [this](const std::shared_ptr<Op>& op) { return op->record_if_done(stats_); });
  return stats_.snapshot();
}

WorkPtr NcclCommunicator::all_reduce(const Tensor& data, ReduceOp op, const std::string& label) {
  check_cuda(name_, OpKind::AllReduce, "data", data);
  return launch(OpKind::AllReduce, label, data.nbytes(), [&] {
    return ncclAllReduce(data.data, data.data, static_cast<size_t>(data.numel()), nccl_type(data.dtype),
                         nccl_op(op), comm_nccl_, comm_);
  });
}

WorkPtr NcclCommunicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op,
                                         const std::vector<int64_t>& counts, const std::string& label) {
  check_cuda(name_, OpKind::ReduceScatter, "input", input);
  check_cuda(name_, OpKind::ReduceScatter, "output", output);
  auto c = split_counts(name_, OpKind::ReduceScatter, input.numel(), size(), counts);
  if (output.numel() != c[rank_])
    throw CommError("reduce_scatter on group " + name_ + ": output holds " +
                    std::to_string(output.numel()) + " elements, this rank's share is " +
                    std::to_string(c[rank_]));
  bool equal = std::all_of(c.begin(), c.end(), [&](int64_t x) { return x == c[0]; });
  auto off = offsets_of(c);
  return launch(OpKind::ReduceScatter, label, input.nbytes(), [&] {
    ncclDataType_t t = nccl_type(input.dtype);
    if (equal)
      return ncclReduceScatter(input.data, output.data, static_cast<size_t>(c[0]), t, nccl_op(op),
                               comm_nccl_, comm_);
    // Uneven shares: one reduce per owner, fused into one launch.
    ncclGroupStart();
    for (int r = 0; r < size(); ++r)
      ncclReduce(element_at(input, off[r]), r == rank_ ? output.data : nullptr, static_cast<size_t>(c[r]), t,
                 nccl_op(op), r, comm_nccl_, comm_);
    return ncclGroupEnd();
  });
}

WorkPtr NcclCommunicator::all_gather(const Tensor& input, const Tensor& output,
                                     const std::vector<int64_t>& counts, const std::string& label) {
  check_cuda(name_, OpKind::AllGather, "input", input);
  check_cuda(name_, OpKind::AllGather, "output", output);
  auto c = split_counts(name_, OpKind::AllGather, output.numel(), size(), counts);
  if (input.numel() != c[rank_])
    throw CommError("all_gather on group " + name_ + ": input holds " + std::to_string(input.numel()) +
                    " elements, this rank's share is " + std::to_string(c[rank_]));
  bool equal = std::all_of(c.begin(), c.end(), [&](int64_t x) { return x == c[0]; });
  auto off = offsets_of(c);
  return launch(OpKind::AllGather, label, input.nbytes(), [&] {
    ncclDataType_t t = nccl_type(input.dtype);
    if (equal)
      return ncclAllGather(input.data, output.data, static_cast<size_t>(c[0]), t, comm_nccl_, comm_);
    ncclGroupStart();
    for (int r = 0; r < size(); ++r)
      ncclBroadcast(r == rank_ ? input.data : nullptr, element_at(output, off[r]), static_cast<size_t>(c[r]), t,
                    r, comm_nccl_, comm_);
    return ncclGroupEnd();
  });
}

WorkPtr NcclCommunicator::all_to_all(const Tensor& input, const Tensor& output,
                                     const std::vector<int64_t>& send_counts,
                                     const std::vector<int64_t>& recv_counts, const std::string& label) {
  check_cuda(name_, OpKind::AllToAll, "input", input);
  check_cuda(name_, OpKind::AllToAll, "output", output);
  if (send_counts.empty() != recv_counts.empty())
    throw CommError("all_to_all on group " + name_ + ": give both send and receive counts or neither");
  auto sc = split_counts(name_, OpKind::AllToAll, input.numel(), size(), send_counts);
  auto rc = split_counts(name_, OpKind::AllToAll, output.numel(), size(), recv_counts);
  auto so = offsets_of(sc), ro = offsets_of(rc);
  return launch(OpKind::AllToAll, label, input.nbytes(), [&] {
    ncclDataType_t t = nccl_type(input.dtype);
    ncclGroupStart();
    for (int r = 0; r < size(); ++r) {
      if (sc[r]) ncclSend(element_at(input, so[r]), static_cast<size_t>(sc[r]), t, r, comm_nccl_, comm_);
      if (rc[r]) ncclRecv(element_at(output, ro[r]), static_cast<size_t>(rc[r]), t, r, comm_nccl_, comm_);
    }
    return ncclGroupEnd();
  });
}

WorkPtr NcclCommunicator::broadcast(const Tensor& data, int root, const std::string& label) {
  check_cuda(name_, OpKind::Broadcast, "data", data);
  if (root < 0 || root >= size())
    throw CommError("broadcast on group " + name_ + ": root " + std::to_string(root) + " is not a group rank");
  return launch(OpKind::Broadcast, label, data.nbytes(), [&] {
    return ncclBroadcast(data.data, data.data, static_cast<size_t>(data.numel()), nccl_type(data.dtype),
                         root, comm_nccl_, comm_);
  });
}

WorkPtr NcclCommunicator::barrier(const std::string& label) {
  return launch(OpKind::Barrier, label, 0, [&] {
    return ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, comm_nccl_, comm_);
  });
}

}  // namespace weft::comm
