#include "train/comm_options.h"

namespace weft {

comm::GroupOptions group_options(const WorkerConfig& cfg) {
  comm::GroupOptions o;
  o.backend = cfg.comm.backend;
  o.device = cfg.device == "cuda" ? Device::CUDA : Device::CPU;
  o.sp = cfg.parallel.sp;
  o.wp = cfg.parallel.wp;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.comm.timeout_s * 1000));
  o.rendezvous_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(cfg.comm.rendezvous_timeout_s * 1000));
  return o;
}

}  // namespace weft
