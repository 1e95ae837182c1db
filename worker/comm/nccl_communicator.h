// weft comm: the NCCL (CUDA) Communicator. Collectives run on a dedicated
// comm stream: each one first waits (cudaStreamWaitEvent) for the compute
// stream's work issued before it, and Work::wait() makes the compute stream
// wait for the collective, so neither the host nor the compute stream blocks
// early. FIFO order is the comm stream's order.
//
// Invariants: one communicator per group per process, created collectively by
// every member in the same order, on the CUDA device current at create()
// (the worker selects it before); buffers are CUDA tensors; the CommContext
// watchdog polls each collective's end event and the communicator's async
// error, and on a missed deadline or a NCCL error aborts the communicator and
// exits with code 3. Only compiled when CUDA is available (WEFT_HAVE_NCCL).
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "comm/comm_context.h"
#include "comm/communicator.h"
#include "comm/tcp_store.h"

struct ncclComm;
struct CUstream_st;

namespace weft::comm {

class NcclCommunicator : public Communicator,
                         public std::enable_shared_from_this<NcclCommunicator> {
 public:
  // The unique id of the group travels through `store` (key
  // "nccl/<name>/<members>"); a one-member group needs no store.
  static std::shared_ptr<NcclCommunicator> create(CommContext& ctx, TcpStore* store,
                                                  std::string name, std::vector<int> members,
                                                  int global_rank);
  ~NcclCommunicator() override;

  // The stream compute kernels run on (default: the legacy default stream).
  void set_compute_stream(CUstream_st* stream) { compute_ = stream; }
  CUstream_st* comm_stream() const { return comm_; }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const std::string& name() const override { return name_; }
  const std::vector<int>& members() const override { return members_; }

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
  WorkPtr barrier(const std::string& label = "") override;

  // Totals of the collectives that completed on the comm stream so far
  // (never blocks: synchronise the stream first to include everything issued).
  CommStats stats() const override;

  struct Op;  // one launched collective (events, stats record)

 private:
  NcclCommunicator(CommContext& ctx, std::string name, std::vector<int> members, int rank,
                   ncclComm* comm);
  template <typename Launch>
  WorkPtr launch(OpKind kind, const std::string& label, uint64_t bytes, Launch&& body);

  CommContext& ctx_;
  const std::string name_;
  const std::vector<int> members_;
  const int rank_;
  ncclComm* comm_nccl_ = nullptr;
  CUstream_st* comm_ = nullptr;
  CUstream_st* compute_ = nullptr;
  float* barrier_buf_ = nullptr;  // one device float for barrier()
  mutable StatsRecorder stats_;
  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<Op>> pending_;  // launched, stats not yet recorded
  std::set<uint64_t> watches_;  // outstanding collectives, unwatched on destruction
};

}  // namespace weft::comm
