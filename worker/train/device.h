// Placing a rank on its device before anything touches it: a rank with
// `device: cuda` takes GPU LOCAL_RANK of the GPUs it can see (one rank per
// GPU; CUDA_VISIBLE_DEVICES narrows and renumbers them, as everywhere in
// CUDA). Runs before the communicators exist, so a missing GPU or driver is
// bad input named in one line (exit 1), not an NCCL failure deep in the
// rendezvous.
#pragma once

#include <map>
#include <string>

#include "config/config.h"
#include "kernels/ops.h"
#include "launch_env.h"
#include "tensor/tensor.h"

namespace weft {

struct DevicePlacement {
  std::string device = "cpu";  // the config's device
  int gpu = -1;                // index among the visible GPUs; -1 on the CPU
  std::string gpu_name;
  std::string describe() const;  // "cpu" or "GPU 1 (NVIDIA H100 80GB HBM3) of 2 visible"
  int visible = 0;
};

// The GPU a cuda rank must use among `visible` GPUs. NCCL (comm.backend nccl,
// what auto resolves to on cuda) takes one GPU per rank: GPU `local_rank`, and more ranks on the
// host (`local_world`) than GPUs is refused on every rank before any
// communicator exists (NCCL refuses two ranks on one GPU). Gloo stages
// through host memory (comm/staged_communicator.h), so ranks share GPUs:
// GPU local_rank % visible. Throws ConfigError naming device, comm.backend,
// LOCAL_RANK/LOCAL_WORLD_SIZE and CUDA_VISIBLE_DEVICES (as given in
// `cuda_visible_devices`, "" when unset); `why` is the CUDA runtime's reason
// for seeing no GPU.
int choose_gpu(int local_rank, int local_world, int visible, CommBackend backend, const std::string& why,
               const std::string& cuda_visible_devices);

// Takes GPU launch.local_rank of those the CUDA runtime sees (CUDA_VISIBLE_DEVICES
// read from `env` for the message) and makes it current for this thread. A
// cpu config is placed on the CPU without touching CUDA.
DevicePlacement place_rank(const WorkerConfig& cfg, const contract::LaunchEnv& launch,
                           const std::map<std::string, std::string>& env);

// MiB of the current GPU in use by anything (the CUDA context, libraries,
// communicators, weft's allocator, other processes): the log tells the memory
// outside weft's allocator apart step by step. 0 without CUDA.
double gpu_mib_in_use();

// Where the model lives, its working dtype and the attention kernels'
// choice (train.attention), from a resolved config (resolve()): an `auto`
// train.dtype here is refused (ConfigError), not decided a second time.
Device model_device(const WorkerConfig& cfg);
DType working_dtype(const WorkerConfig& cfg);
ops::AttentionMode attention_mode(const WorkerConfig& cfg);

}  // namespace weft
