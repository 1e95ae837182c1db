#include "parallel/host_scalars.h"

#include "kernels/ops.h"

namespace weft {

comm::WorkPtr all_reduce_host(comm::Communicator& group, Device device, float* values, int n, comm::ReduceOp op,
                              const std::string& label) {
  const Tensor host = Tensor::f32(values, {n});
  if (device == Device::CPU) return group.all_reduce(host, op, label);
  Buffer staging(host.nbytes(), device);
  const Tensor dev = staging.as(DType::F32, {n});
  ops::transfer(dev, host);
  comm::WorkPtr w = group.all_reduce(dev, op, label);
  w->wait();               // orders the compute stream after the collective
  ops::transfer(host, dev);  // on the compute stream; returns once it landed
  return w;
}

}  // namespace weft
