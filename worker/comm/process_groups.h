// weft comm: process-level setup. From the rank's launch environment
// (contract/launch_env.h: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// WEFT_ATTEMPT, WEFT_RDZV_TOKEN, WEFT_BIND_ADDR), runs the rendezvous (rank 0
// serves the store) and builds the RankGrid's communicators. main() owns the returned ProcessGroups and
// passes its communicators to the strategies that use them; there is no
// global. Without RANK/WORLD_SIZE the process is rank 0 of 1 and needs no
// store.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "comm/comm_context.h"
#include "comm/communicator.h"
#include "comm/network_model.h"
#include "comm/rank_grid.h"
#include "comm/run_fingerprint.h"
#include "comm/tcp_store.h"
#include "launch_env.h"
#include "tensor/tensor.h"
#include "weft_modes.h"

namespace gloo::transport {
class Device;
}

namespace weft::comm {

class StagingDevice;

// The environment contract (contract/launch_env.h), parsed once by main()
// with contract::parse_launch_env.
using ProcessEnv = contract::LaunchEnv;
std::map<std::string, std::string> current_environment();

struct GroupOptions {
  // gloo | nccl: comm.backend as the worker's resolve() left it (auto is
  // decided there, from the device, and refused here). gloo with device cuda
  // stages every collective through host memory (staged_communicator.h).
  contract::CommBackend backend = contract::CommBackend::Gloo;
  Device device = Device::CPU;
  int sp = 1;
  int wp = 1;
  std::chrono::milliseconds timeout{300000};              // per collective
  std::chrono::milliseconds rendezvous_timeout{600000};
  FailurePolicy policy = FailurePolicy::Exit;
  NetworkModel network;  // comm.simulate: Gloo groups emulate this network (off by default)
  // comm.lanes: concurrent Gloo lanes per group (GlooCommunicator); NCCL
  // ignores it (it has its comm stream).
  int lanes = 2;
  // The stream NCCL collectives are ordered against (a cudaStream_t: the
  // kernels' compute stream), asked for when an NCCL group is created (it
  // touches the GPU); unset or nullptr: the legacy default stream.
  std::function<void*()> cuda_compute_stream;
  // The run fingerprint's settings (comm/run_fingerprint.h), compared over
  // the store before any group is built; empty: not compared.
  Settings shared_settings;
};

class ProcessGroups {
 public:
  ~ProcessGroups();
  int rank() const { return env_.rank; }
  int world_size() const { return env_.world; }
  const RankGrid& grid() const { return grid_; }
  CommContext& context() { return *ctx_; }
  TcpStore* store() { return store_.get(); }  // null for a one-rank world

  CommunicatorPtr world, dp, sp, wp, wdp;

 private:
  friend std::unique_ptr<ProcessGroups> init_process_groups(const ProcessEnv&, const GroupOptions&);
  ProcessGroups(ProcessEnv env, RankGrid grid) : env_(std::move(env)), grid_(grid) {}

  ProcessEnv env_;
  RankGrid grid_;
  // The destructor releases the communicators before these.
  std::unique_ptr<CommContext> ctx_;
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStore> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<StagingDevice> staging_;  // gloo with device: cuda
};

// Rendezvous, agree on opt.shared_settings, and build every group of the
// grid. Throws CommError (bad env or config: exit 1; SettingsMismatchError
// when the ranks' settings differ; RankRefusedError when a rank refused to
// join, this one for a RANK given twice or a WORLD_SIZE unlike rank 0's, and
// then rank 0 first keeps its store up until the others heard) or
// RendezvousError (peers never showed up: exit 3). Ignores
// SIGPIPE for the process, so a write to a dead peer fails as a lost peer.
std::unique_ptr<ProcessGroups> init_process_groups(const ProcessEnv& env, const GroupOptions& opt);

}  // namespace weft::comm
