// A group of one rank. Every collective over one rank is the identity, so
// this communicator needs no transport: all_reduce and broadcast leave the
// data as it is, reduce_scatter, all_gather and all_to_all copy input to
// output. Host tensors are copied on the calling thread; CUDA tensors by
// cudaMemcpyAsync on the compute stream, ordered with the kernels like any
// op. Work is complete when the call returns (Work::wait does nothing).
//
// Why it exists: groups of one are common (every group of a one-GPU run,
// the sp, wp or dp group of an ISP grid with that dimension 1), and a
// transport for them costs: NCCL allocates device buffers for every
// communicator it creates, a single-rank one included (docs/cuda.md).
// init_process_groups builds one of these for every group of size 1.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace weft::comm {

class SoloCommunicator : public Communicator {
 public:
  // cuda_stream: the compute stream (a cudaStream_t) for CUDA tensors;
  // nullptr: the legacy default stream. Ignored for host tensors.
  SoloCommunicator(std::string name, int global_rank, void* cuda_stream = nullptr);

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& members() const override { return members_; }

  WorkPtr all_reduce(const Tensor& data, ReduceOp op, const std::string& label = "") override;
  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, const std::vector<int64_t>& counts = {},
                         const std::string& label = "") override;
  WorkPtr all_gather(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts = {},
                     const std::string& label = "") override;
  WorkPtr all_to_all(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts = {},
                     const std::vector<int64_t>& recv_counts = {}, const std::string& label = "") override;
  WorkPtr broadcast(const Tensor& data, int root, const std::string& label = "") override;
  WorkPtr barrier(const std::string& label = "") override;

  CommStats stats() const override { return stats_.snapshot(); }

 private:
  // Checks input and output of op (dtype, data, same dtype and numel) and
  // copies input to output.
  WorkPtr identity(OpKind op, const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts);
  WorkPtr done(OpKind op, uint64_t bytes);

  std::string name_;
  std::vector<int> members_;
  void* stream_;
  StatsRecorder stats_;
};

}  // namespace weft::comm
