// The comm.simulate emulator's cost model: messages x (latency + size / bandwidth).
#include "comm/network_model.h"

#include <gtest/gtest.h>

namespace weft::comm {
namespace {

double ms(std::chrono::nanoseconds d) { return d.count() / 1e6; }

TEST(NetworkModel, RingAndTreeCosts) {
  const NetworkModel net{200e-6, 10e9 / 8};  // 200 us, 10 Gb/s
  const uint64_t mib = 1 << 20;
  // all-reduce of 4 MiB over 2 ranks: 2 messages of 2 MiB each.
  EXPECT_NEAR(ms(net.delay(OpKind::AllReduce, 4 * mib, 2)), 2 * (0.2 + 2 * mib / 1.25e9 * 1e3), 1e-6);
  // over 4 ranks: 6 messages of 1 MiB.
  EXPECT_NEAR(ms(net.delay(OpKind::AllReduce, 4 * mib, 4)), 6 * (0.2 + mib / 1.25e9 * 1e3), 1e-6);
  EXPECT_NEAR(ms(net.delay(OpKind::ReduceScatter, 4 * mib, 4)), 3 * (0.2 + mib / 1.25e9 * 1e3), 1e-6);
  EXPECT_NEAR(ms(net.delay(OpKind::AllGather, mib, 4)), 3 * (0.2 + mib / 1.25e9 * 1e3), 1e-6);
  EXPECT_NEAR(ms(net.delay(OpKind::Broadcast, mib, 4)), 2 * (0.2 + mib / 1.25e9 * 1e3), 1e-6);
  EXPECT_NEAR(ms(net.delay(OpKind::Barrier, 0, 8)), 6 * 0.2, 1e-6);
}

TEST(NetworkModel, OffOrAloneCostsNothingAndLatencyFavoursFewerMessages) {
  EXPECT_EQ(NetworkModel{}.delay(OpKind::AllReduce, 1 << 20, 8).count(), 0);
  EXPECT_FALSE(NetworkModel{}.on());
  const NetworkModel net{100e-6, 0};  // latency only
  EXPECT_TRUE(net.on());
  EXPECT_EQ(net.delay(OpKind::AllReduce, 1 << 20, 1).count(), 0);
  // The same bytes in 8 buckets cost 8 times the latency of one bucket.
  const auto one = net.delay(OpKind::AllReduce, 8 << 20, 2);
  const auto eight = net.delay(OpKind::AllReduce, 1 << 20, 2) * 8;
  EXPECT_EQ(eight, one * 8);
}

}  // namespace
}  // namespace weft::comm
