// Gloo full meshes through weft's store (comm/gloo_mesh.h), ranks as threads.
#include "comm/gloo_mesh.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "comm/gloo_communicator.h"
#include "comm/tcp_store.h"

namespace weft::comm {
namespace {

using namespace std::chrono_literals;

StoreOptions opts(uint16_t port) {
  StoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.token = "t";
  o.timeout = 20000ms;
  return o;
}

TEST(GlooMesh, KeyPrefixIsShortAndTellsMemberListsApart) {
  std::vector<int> big(8192);
  for (int i = 0; i < 8192; ++i) big[i] = i;
  const std::string p = mesh_key_prefix("dp", big);
  EXPECT_LT(p.size(), 40u);
  EXPECT_NE(mesh_key_prefix("dp", {0, 2}), mesh_key_prefix("dp", {1, 3}));
  EXPECT_NE(mesh_key_prefix("dp", {0, 2}), mesh_key_prefix("world", {0, 2}));
  EXPECT_EQ(mesh_key_prefix("dp", {0, 2}), mesh_key_prefix("dp", {0, 2}));
}

// Four ranks, two lanes (three meshes each): every rank publishes one record
// per group and every lane's pairs connect (an all-reduce on each group sums
// every rank's value).
TEST(GlooMesh, FourRanksConnectEveryLaneAndReduce) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  constexpr int kRanks = 4;
  std::vector<float> sums(kRanks, 0.f);
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> ts;
  for (int r = 0; r < kRanks; ++r)
    ts.emplace_back([&, r] {
      try {
        CommContext ctx(std::chrono::seconds(20));
        TcpStore store(opts(server.port()));
        auto device = make_gloo_device("127.0.0.1");
        auto world = GlooCommunicator::create(ctx, &store, device, "world", {0, 1, 2, 3}, r, 2);
        auto dp = GlooCommunicator::create(ctx, &store, device, "dp", {0, 1, 2, 3}, r, 2);
        std::vector<float> v(1024, float(r + 1));
        world->all_reduce(Tensor::f32(v.data(), Shape{1024}), ReduceOp::Sum)->wait();
        dp->all_reduce(Tensor::f32(v.data(), Shape{1024}), ReduceOp::Sum)->wait();
        sums[r] = v[1023];
        // One record per rank and group, under the short prefix.
        EXPECT_EQ(store.get(mesh_key_prefix("world", {0, 1, 2, 3}) + std::to_string(r), 1000ms).size(),
                  4u + 28u + 3u * 3u * 2u);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(sums[r], 40.f) << "rank " << r;  // (1+2+3+4) summed twice over 4 ranks: 10 * 4
  }
}

}  // namespace
}  // namespace weft::comm
