#include "comm/solo_communicator.h"

#include <cstring>

#ifdef WEFT_HAVE_NCCL
#include <cuda_runtime.h>
#endif

namespace weft::comm {

namespace {

class DoneWork : public Work {
 public:
  void wait() override {}
  bool completed() override { return true; }
  double comm_seconds() override { return 0; }
  double enqueue_to_start_seconds() override { return 0; }
};

}  // namespace

SoloCommunicator::SoloCommunicator(std::string name, int global_rank, void* cuda_stream)
    : name_(std::move(name)), members_{global_rank}, stream_(cuda_stream) {}

WorkPtr SoloCommunicator::done(OpKind op, uint64_t bytes) {
  stats_.add(op, 0.0, bytes);
  return std::make_shared<DoneWork>();
}

WorkPtr SoloCommunicator::identity(OpKind op, const Tensor& input, const Tensor& output,
                                   const std::vector<int64_t>& counts) {
  check_buffer(name_, op, "input", input);
  check_buffer(name_, op, "output", output);
  const std::string where = std::string(op_name(op)) + " on group " + name_ + ": ";
  if (input.dtype != output.dtype)
    throw CommError(where + "input is " + dtype_name(input.dtype) + ", output " + dtype_name(output.dtype));
  if (input.numel() != output.numel())
    throw CommError(where + "input has " + std::to_string(input.numel()) + " elements and output " +
                    std::to_string(output.numel()) + "; a group of one rank needs the same");
  split_counts(name_, op, input.numel(), 1, counts);
  const size_t bytes = input.nbytes();
  if (bytes > 0 && input.data != output.data) {
    if (input.device == Device::CPU && output.device == Device::CPU) {
      std::memcpy(output.data, input.data, bytes);
    } else {
#ifdef WEFT_HAVE_NCCL
      const cudaError_t e = cudaMemcpyAsync(output.data, input.data, bytes, cudaMemcpyDefault,
                                            static_cast<cudaStream_t>(stream_));
      if (e != cudaSuccess) throw CommError(where + "copy failed: " + cudaGetErrorString(e));
#else
      throw CommError(where + "CUDA tensor, but weft was built without CUDA");
#endif
    }
  }
  return done(op, bytes);
}

WorkPtr SoloCommunicator::all_reduce(const Tensor& data, ReduceOp, const std::string&) {
  check_buffer(name_, OpKind::AllReduce, "data", data);
  return done(OpKind::AllReduce, data.nbytes());  // the sum or mean of one value is that value
}

WorkPtr SoloCommunicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp,
                                         const std::vector<int64_t>& counts, const std::string&) {
  return identity(OpKind::ReduceScatter, input, output, counts);
}

WorkPtr SoloCommunicator::all_gather(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts,
                                     const std::string&) {
  return identity(OpKind::AllGather, input, output, counts);
}

WorkPtr SoloCommunicator::all_to_all(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                                     const std::vector<int64_t>& recv_counts, const std::string&) {
  split_counts(name_, OpKind::AllToAll, output.numel(), 1, recv_counts);
  return identity(OpKind::AllToAll, input, output, send_counts);
}

WorkPtr SoloCommunicator::broadcast(const Tensor& data, int root, const std::string&) {
  check_buffer(name_, OpKind::Broadcast, "data", data);
  if (root != 0)
    throw CommError("broadcast on group " + name_ + ": root " + std::to_string(root) +
                    " is not a rank of this group of one");
  return done(OpKind::Broadcast, data.nbytes());
}

WorkPtr SoloCommunicator::barrier(const std::string&) { return done(OpKind::Barrier, 0); }

}  // namespace weft::comm
