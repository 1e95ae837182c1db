// The worker config's comm/parallel/device fields become the process-group
// options (comm/ never reads the config itself).
#include "train/comm_options.h"

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

}  // namespace
}  // namespace weft
