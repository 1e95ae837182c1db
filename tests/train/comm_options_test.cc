// The worker config's comm/parallel/device fields become the process-group
// options (comm/ never reads the config itself).
#include "train/comm_options.h"
#include "train/device.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

TEST(CommOptions, FromTheWorkerConfig) {
  WorkerConfig cfg;
  cfg.comm.backend = "gloo";
  cfg.comm.timeout_s = 2.5;
  cfg.comm.rendezvous_timeout_s = 30;
  cfg.parallel.sp = 2;
  cfg.parallel.wp = 4;
  cfg.device = "cuda";
  comm::GroupOptions o = group_options(cfg);
  EXPECT_EQ(o.backend, "gloo");
  EXPECT_EQ(o.timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(o.rendezvous_timeout, std::chrono::milliseconds(30000));
  EXPECT_EQ(o.sp, 2);
  EXPECT_EQ(o.wp, 4);
  EXPECT_EQ(o.device, Device::CUDA);
  EXPECT_EQ(o.policy, comm::FailurePolicy::Exit);
  EXPECT_EQ(o.lanes, 2) << "comm.lanes defaults to 2";
  cfg.comm.lanes = 4;
  EXPECT_EQ(group_options(cfg).lanes, 4);
  cfg.device = "cpu";
  EXPECT_EQ(group_options(cfg).device, Device::CPU);
}

// Placing a rank on its GPU (train/device.h): the choice is a pure function
// of LOCAL_RANK and the visible count, tested here on any machine.
TEST(DevicePlacement, LocalRankPicksItsGpuAndTooFewGpusAreNamed) {
  EXPECT_EQ(choose_gpu(0, 1, "", ""), 0);
  EXPECT_EQ(choose_gpu(3, 8, "", "0,1,2,3,4,5,6,7"), 3);
  try {
    choose_gpu(2, 2, "", "4,5");
    FAIL() << "LOCAL_RANK 2 of 2 visible GPUs was accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("LOCAL_RANK 2"), std::string::npos) << m;
    EXPECT_NE(m.find("CUDA_VISIBLE_DEVICES=4,5"), std::string::npos) << m;
  }
  try {
    choose_gpu(0, 0, "no CUDA-capable device is detected", "");
    FAIL() << "no GPU was accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device: cuda"), std::string::npos) << m;
    EXPECT_NE(m.find("no CUDA-capable device is detected"), std::string::npos) << m;
    EXPECT_NE(m.find("WEFT_DEVICE=cpu"), std::string::npos) << m;
  }
}

TEST(DevicePlacement, CpuRanksNeverTouchCuda) {
  WorkerConfig cfg;
  cfg.device = "cpu";
  const DevicePlacement p = place_rank(cfg, contract::parse_launch_env({{"LOCAL_RANK", "5"}}), {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(p.gpu, -1);
  EXPECT_EQ(p.describe(), "cpu");
}

}  // namespace
}  // namespace weft
