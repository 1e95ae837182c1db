#include "train/device.h"

#include <algorithm>

#include "kernels/ops.h"

namespace weft {

namespace {

std::string visible_note(const std::string& cuda_visible_devices) {
  return cuda_visible_devices.empty() ? "CUDA_VISIBLE_DEVICES unset"
                                      : "CUDA_VISIBLE_DEVICES=" + cuda_visible_devices;
}

}  // namespace

double gpu_mib_in_use() { return ops::cuda_device_used() / 1048576.0; }

std::string DevicePlacement::describe() const {
  if (gpu < 0) return device;
  return "GPU " + std::to_string(gpu) + " (" + gpu_name + ") of " + std::to_string(visible) + " visible";
}

int choose_gpu(int local_rank, int local_world, int visible, CommBackend backend, const std::string& why,
               const std::string& cuda_visible_devices) {
  if (visible <= 0)
    throw ConfigError("device: cuda, but no GPU is usable (" + (why.empty() ? "no device found" : why) + "; " +
                      visible_note(cuda_visible_devices) + "); run on a GPU node or set device: cpu (WEFT_DEVICE=cpu)");
  if (backend == CommBackend::Gloo) return local_rank % visible;
  const int ranks = std::max(local_world, local_rank + 1);
  if (ranks > visible)
    throw ConfigError("LOCAL_WORLD_SIZE " + std::to_string(ranks) + " ranks on this host (LOCAL_RANK " +
                      std::to_string(local_rank) + ") but only " + std::to_string(visible) + " GPU" +
                      (visible == 1 ? " is" : "s are") + " visible (" + visible_note(cuda_visible_devices) +
                      "); comm.backend " + std::string(contract::mode_name(backend)) + " with device: cuda runs one rank per GPU (NCCL refuses two "
                      "ranks on one GPU): start at most that many ranks per host, or set comm.backend: gloo to "
                      "share GPUs, staging collectives through host memory");
  return local_rank;
}

DevicePlacement place_rank(const WorkerConfig& cfg, const contract::LaunchEnv& launch,
                           const std::map<std::string, std::string>& env) {
  DevicePlacement p;
  p.device = contract::mode_name(cfg.device);
  if (cfg.device != ComputeDevice::Cuda) return p;
  auto it = env.find("CUDA_VISIBLE_DEVICES");
  const std::string cvd = it == env.end() ? "" : it->second;
  std::string why;
  p.visible = ops::cuda_device_count(&why);
  p.gpu = choose_gpu(launch.local_rank, launch.local_world, p.visible, cfg.comm.backend, why, cvd);
  p.gpu_name = ops::use_cuda_device(p.gpu);
  return p;
}

Device model_device(const WorkerConfig& cfg) {
  switch (cfg.device) {
    case ComputeDevice::Cpu: return Device::CPU;
    case ComputeDevice::Cuda: return Device::CUDA;
  }
  throw ConfigError("device: not a device");
}

DType working_dtype(const WorkerConfig& cfg) {
  switch (cfg.train.dtype) {
    case WorkingDtype::F32: return DType::F32;
    case WorkingDtype::Bf16: return DType::BF16;
    case WorkingDtype::Auto: break;
  }
  throw ConfigError("train.dtype: auto was not resolved (resolve() makes it f32 or bf16 from the device)");
}

ops::AttentionMode attention_mode(const WorkerConfig& cfg) {
  switch (cfg.train.attention) {
    case Attention::Auto: return ops::AttentionMode::Auto;
    case Attention::Cudnn: return ops::AttentionMode::Cudnn;
    case Attention::Simt: return ops::AttentionMode::Simt;
  }
  throw ConfigError("train.attention: not a mode");
}

}  // namespace weft
