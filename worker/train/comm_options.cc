#include "train/comm_options.h"

#include "kernels/ops.h"
#include "train/device.h"

namespace weft {

comm::GroupOptions group_options(const WorkerConfig& cfg) {
  comm::GroupOptions o;
  o.backend = cfg.comm.backend;  // resolved: gloo or nccl (init_process_groups refuses auto)
  o.device = model_device(cfg);
  o.sp = cfg.parallel.sp;
  o.wp = cfg.parallel.wp;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.comm.timeout_s * 1000));
  o.lanes = cfg.comm.lanes;
  // Bucket reductions wait for the backward kernels on this stream, and
  // compute waits for them there (NcclCommunicator).
  if (o.device == Device::CUDA) o.cuda_compute_stream = [] { return ops::cuda_compute_stream(); };
  o.rendezvous_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(cfg.comm.rendezvous_timeout_s * 1000));
  // Gb/s of the config to bytes/s of the model.
  o.network.latency_s = cfg.comm.simulate.latency_us * 1e-6;
  o.network.bytes_per_second = cfg.comm.simulate.bandwidth_gbps * 1e9 / 8;
  return o;
}

}  // namespace weft
