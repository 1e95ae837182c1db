// A one-rank world in this process: group setup without a store
// (groups of one rank, which need no transport), argument checks and FIFO
// order on the Gloo comm thread of a one-rank Gloo group.
#include "comm/process_groups.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "comm/gloo_communicator.h"
#include "comm/solo_communicator.h"


namespace weft::comm {
namespace {

using ::testing::HasSubstr;

TEST(ProcessGroups, OneRankWorldNeedsNoStore) {
  GroupOptions o;
  o.timeout = std::chrono::seconds(5);
  auto pg = init_process_groups(ProcessEnv{}, o);
  EXPECT_EQ(pg->store(), nullptr);
  for (auto* c : {pg->world.get(), pg->dp.get(), pg->sp.get(), pg->wp.get(), pg->wdp.get()}) {
    EXPECT_EQ(c->size(), 1);
    EXPECT_EQ(c->rank(), 0);
    EXPECT_NE(dynamic_cast<SoloCommunicator*>(c), nullptr) << c->name() << ": a group of one needs no transport";
  }
  EXPECT_EQ(pg->dp->name(), "dp");
  std::vector<float> x(10);
  std::iota(x.begin(), x.end(), 1.0f);
  pg->dp->all_reduce(Tensor::f32(x.data(), Shape{10}), ReduceOp::Avg)->wait();
  EXPECT_EQ(x[9], 10.0f);
  std::vector<float> shard(10);
  pg->wp->reduce_scatter(Tensor::f32(x.data(), Shape{10}), Tensor::f32(shard.data(), Shape{10}),
                         ReduceOp::Sum)->wait();
  EXPECT_EQ(shard, x);
  CommStats s = pg->dp->stats();
  EXPECT_EQ(s.by_op["all_reduce"].count, 1u);
  EXPECT_EQ(s.by_op["all_reduce"].bytes, 40u);
}

TEST(SoloCommunicator, EveryCollectiveIsTheIdentity) {
  SoloCommunicator c("sp", 3);
  EXPECT_EQ(c.members(), std::vector<int>{3});
  std::vector<float> x{1, 2, 3, 4}, y(4, 0.0f);
  c.all_reduce(Tensor::f32(x.data(), Shape{4}), ReduceOp::Sum)->wait();
  c.broadcast(Tensor::f32(x.data(), Shape{4}), 0)->wait();
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3, 4}));
  for (int op = 0; op < 3; ++op) {
    std::fill(y.begin(), y.end(), 0.0f);
    const Tensor in = Tensor::f32(x.data(), Shape{4}), out = Tensor::f32(y.data(), Shape{4});
    WorkPtr w = op == 0   ? c.reduce_scatter(in, out, ReduceOp::Avg)
                : op == 1 ? c.all_gather(in, out, {4})
                          : c.all_to_all(in, out, {4}, {4});
    EXPECT_TRUE(w->completed());
    w->wait();
    EXPECT_EQ(y, x) << op;
  }
  std::vector<uint16_t> h{1, 2, 3}, g(3);  // bf16 moves as bytes
  c.all_gather(Tensor(h.data(), DType::BF16, {3}), Tensor(g.data(), DType::BF16, {3}))->wait();
  EXPECT_EQ(g, h);
  EXPECT_EQ(c.stats().by_op["all_gather"].count, 2u);
  EXPECT_EQ(c.stats().by_op["all_gather"].bytes, 22u);
}

TEST(SoloCommunicator, MisuseThrowsNamingGroupAndOp) {
  SoloCommunicator c("wp", 0);
  std::vector<float> a(8), b(3);
  std::vector<uint16_t> h(8);
  std::vector<int32_t> i(4);
  auto error = [](auto&& call) {
    try {
      call();
    } catch (const CommError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Tensor a8 = Tensor::f32(a.data(), Shape{8}), b3 = Tensor::f32(b.data(), Shape{3});
  EXPECT_THAT(error([&] { c.reduce_scatter(a8, b3, ReduceOp::Sum); }),
              HasSubstr("reduce_scatter on group wp: input has 8 elements and output 3"));
  EXPECT_THAT(error([&] { c.all_gather(a8, Tensor(h.data(), DType::BF16, {8})); }),
              HasSubstr("all_gather on group wp: input is f32, output bf16"));
  EXPECT_THAT(error([&] { c.all_to_all(a8, a8, {5}, {8}); }), HasSubstr("counts sum to 5"));
  EXPECT_THAT(error([&] { c.all_reduce(Tensor::i32(i.data(), Shape{4}), ReduceOp::Sum); }),
              HasSubstr("all_reduce on group wp: data has dtype i32"));
  EXPECT_THAT(error([&] { c.broadcast(a8, 1); }), HasSubstr("root 1 is not a rank of this group of one"));
}

TEST(ProcessGroups, RejectsBadBackendAndGrid) {
  GroupOptions o;
  // auto is decided by the worker config's resolve(), never here.
  o.backend = contract::CommBackend::Auto;
  EXPECT_THAT([&] {
    try { init_process_groups(ProcessEnv{}, o); } catch (const CommError& e) { return std::string(e.what()); }
    return std::string();
  }(), HasSubstr("comm.backend: auto reached the process groups unresolved"));
  o.backend = contract::CommBackend::Gloo;
  o.sp = 2;
  EXPECT_THROW(init_process_groups(ProcessEnv{}, o), CommError);
}

// A Gloo group of this one process (init_process_groups would build a
// SoloCommunicator for it).
struct OneRankGloo {
  CommContext ctx{std::chrono::seconds(5)};
  std::shared_ptr<Communicator> world =
      GlooCommunicator::create(ctx, nullptr, make_gloo_device("127.0.0.1"), "world", {0}, 0, 2);
};

TEST(GlooCommunicator, MisuseThrowsNamingGroupAndOp) {
  OneRankGloo g;
  auto* pg = &g;
  std::vector<float> a(8), b(3);
  std::vector<int32_t> i(4);
  try {
    pg->world->reduce_scatter(Tensor::f32(a.data(), Shape{8}), Tensor::f32(b.data(), Shape{3}), ReduceOp::Sum);
    FAIL();
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), HasSubstr("reduce_scatter on group world"));
  }
  EXPECT_THROW(pg->world->all_reduce(Tensor::i32(i.data(), Shape{4}), ReduceOp::Sum), CommError);
  EXPECT_THROW(pg->world->all_gather(Tensor::f32(b.data(), Shape{3}), Tensor::f32(a.data(), Shape{8}), {5}),
               CommError);
  EXPECT_THROW(pg->world->broadcast(Tensor::f32(a.data(), Shape{8}), 1), CommError);
  // A CUDA tensor is refused before a lane could dereference it.
  Tensor on_gpu = Tensor::f32(a.data(), Shape{8});
  on_gpu.device = Device::CUDA;
  try {
    pg->world->all_reduce(on_gpu, ReduceOp::Sum);
    FAIL();
  } catch (const CommError& e) {
    EXPECT_THAT(e.what(), HasSubstr("all_reduce on group world: data is a CUDA tensor; Gloo takes host memory"));
  }
  EXPECT_THROW(pg->world->all_gather(Tensor::f32(b.data(), Shape{3}), on_gpu.slice0(0, 3)), CommError);
}

TEST(GlooCommunicator, RunsCollectivesInIssueOrderOffTheCallerThread) {
  OneRankGloo g;
  auto* pg = &g;
  std::vector<std::vector<float>> bufs(50, std::vector<float>(1 << 14, 1.0f));
  std::vector<WorkPtr> works;
  for (auto& b : bufs) works.push_back(pg->world->all_reduce(Tensor::f32(b.data(), Shape{1 << 14}), ReduceOp::Sum));
  works.back()->wait();
  for (auto& w : works) {
    EXPECT_TRUE(w->completed()) << "FIFO: the last collective finished before an earlier one";
    EXPECT_GE(w->comm_seconds(), 0.0);
    EXPECT_GE(w->enqueue_to_start_seconds(), 0.0);
  }
}

}  // namespace
}  // namespace weft::comm
