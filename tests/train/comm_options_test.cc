// The worker config's comm/parallel/device fields become the process-group
// options (comm/ never reads the config itself).
#include "train/comm_options.h"
#include "train/device.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

TEST(CommOptions, FromTheWorkerConfig) {
  WorkerConfig cfg;
  cfg.comm.backend = CommBackend::Gloo;
  cfg.comm.timeout_s = 2.5;
  cfg.comm.rendezvous_timeout_s = 30;
  cfg.parallel.sp = 2;
  cfg.parallel.wp = 4;
  cfg.device = ComputeDevice::Cuda;
  comm::GroupOptions o = group_options(cfg);
  EXPECT_EQ(o.backend, CommBackend::Gloo);
  EXPECT_EQ(o.timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(o.rendezvous_timeout, std::chrono::milliseconds(30000));
  EXPECT_EQ(o.sp, 2);
  EXPECT_EQ(o.wp, 4);
  EXPECT_EQ(o.device, Device::CUDA);
  EXPECT_EQ(o.policy, comm::FailurePolicy::Exit);
  EXPECT_EQ(o.lanes, 2) << "comm.lanes defaults to 2";
  cfg.comm.lanes = 4;
  EXPECT_EQ(group_options(cfg).lanes, 4);
  cfg.device = ComputeDevice::Cpu;
  EXPECT_EQ(group_options(cfg).device, Device::CPU);
}

// The model's device, working dtype and attention mode come from a resolved
// config; an auto dtype reaching them is refused, not decided a second time.
TEST(CommOptions, DeviceDtypeAndAttentionFromTheResolvedConfig) {
  WorkerConfig cfg;
  EXPECT_THROW(working_dtype(cfg), ConfigError);
  EXPECT_EQ(model_device(cfg), Device::CPU);
  EXPECT_EQ(working_dtype(resolved(cfg)), DType::F32);
  cfg.device = ComputeDevice::Cuda;
  EXPECT_EQ(model_device(cfg), Device::CUDA);
  EXPECT_EQ(working_dtype(resolved(cfg)), DType::BF16);
  EXPECT_EQ(group_options(resolved(cfg)).backend, CommBackend::Nccl);
  cfg.device = ComputeDevice::Cpu;
  EXPECT_EQ(group_options(resolved(cfg)).backend, CommBackend::Gloo);
  EXPECT_EQ(attention_mode(cfg), ops::AttentionMode::Auto);
  cfg.train.attention = Attention::Cudnn;
  EXPECT_EQ(attention_mode(cfg), ops::AttentionMode::Cudnn);
  cfg.train.attention = Attention::Simt;
  EXPECT_EQ(attention_mode(cfg), ops::AttentionMode::Simt);
}

// Placing a rank on its GPU (train/device.h): the choice is a pure function
// of LOCAL_RANK, LOCAL_WORLD_SIZE, the backend and the visible count, tested
// here on any machine.
TEST(DevicePlacement, LocalRankPicksItsGpuAndTooFewGpusAreNamed) {
  EXPECT_EQ(choose_gpu(0, 1, 1, CommBackend::Nccl, "", ""), 0);
  EXPECT_EQ(choose_gpu(3, 8, 8, CommBackend::Nccl, "", "0,1,2,3,4,5,6,7"), 3);
  try {
    choose_gpu(2, 3, 2, CommBackend::Nccl, "", "4,5");
    FAIL() << "LOCAL_RANK 2 of 2 visible GPUs was accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("LOCAL_RANK 2"), std::string::npos) << m;
    EXPECT_NE(m.find("CUDA_VISIBLE_DEVICES=4,5"), std::string::npos) << m;
  }
  try {
    choose_gpu(0, 0, 0, CommBackend::Nccl, "no CUDA-capable device is detected", "");
    FAIL() << "no GPU was accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device: cuda"), std::string::npos) << m;
    EXPECT_NE(m.find("no CUDA-capable device is detected"), std::string::npos) << m;
    EXPECT_NE(m.find("WEFT_DEVICE=cpu"), std::string::npos) << m;
  }
}

// NCCL runs one rank per GPU: two ranks on one GPU are refused on every rank,
// rank 0 included (else it would wait in ncclCommInitRank for a peer that
// already exited), naming the fields that decide it and the way out.
TEST(DevicePlacement, NcclRefusesMoreRanksThanGpusOnEveryRank) {
  for (CommBackend backend : {CommBackend::Nccl}) {
    for (int local_rank : {0, 1}) {
      try {
        choose_gpu(local_rank, 2, 1, backend, "", "");
        FAIL() << contract::mode_name(backend) << ": LOCAL_RANK " << local_rank << " of 2 ranks on one GPU was accepted";
      } catch (const ConfigError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("LOCAL_WORLD_SIZE 2"), std::string::npos) << m;
        EXPECT_NE(m.find("comm.backend " + std::string(contract::mode_name(backend))), std::string::npos) << m;
        EXPECT_NE(m.find("device: cuda"), std::string::npos) << m;
        EXPECT_NE(m.find("comm.backend: gloo"), std::string::npos) << m;
        EXPECT_NE(m.find("CUDA_VISIBLE_DEVICES unset"), std::string::npos) << m;
      }
    }
  }
}

// Gloo stages CUDA tensors through host memory, so ranks share GPUs round-robin.
TEST(DevicePlacement, GlooRanksShareGpusRoundRobin) {
  EXPECT_EQ(choose_gpu(0, 4, 1, CommBackend::Gloo, "", ""), 0);
  EXPECT_EQ(choose_gpu(3, 4, 1, CommBackend::Gloo, "", ""), 0);
  EXPECT_EQ(choose_gpu(3, 4, 2, CommBackend::Gloo, "", "0,1"), 1);
  EXPECT_EQ(choose_gpu(2, 4, 2, CommBackend::Gloo, "", "0,1"), 0);
  EXPECT_THROW(choose_gpu(0, 2, 0, CommBackend::Gloo, "no CUDA-capable device is detected", ""), ConfigError);
}

TEST(DevicePlacement, CpuRanksNeverTouchCuda) {
  WorkerConfig cfg;
  cfg.device = ComputeDevice::Cpu;
  const DevicePlacement p = place_rank(cfg, contract::parse_launch_env({{"LOCAL_RANK", "5"}}), {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(p.gpu, -1);
  EXPECT_EQ(p.describe(), "cpu");
}

}  // namespace
}  // namespace weft
