// A one-rank world in this process: env parsing, group setup without a store,
// argument checks and FIFO order on the Gloo comm thread.
#include "comm/process_groups.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>


namespace weft::comm {
namespace {

using ::testing::HasSubstr;

std::string env_error(const std::map<std::string, std::string>& env) {
  try {
    read_process_env(env);
  } catch (const CommError& e) {
    return e.what();
  }
  return "";
}

TEST(ProcessEnv, DefaultsToOneRank) {
  ProcessEnv e = read_process_env({});
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world, 1);
  EXPECT_EQ(e.attempt, 0);
}

TEST(ProcessEnv, ErrorsNameTheVariable) {
  EXPECT_THAT(env_error({{"RANK", "abc"}}), HasSubstr("RANK: 'abc'"));
  EXPECT_THAT(env_error({{"WORLD_SIZE", "2"}, {"RANK", "2"}}), HasSubstr("RANK: '2'"));
  EXPECT_THAT(env_error({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_PORT", "29500"}}),
              HasSubstr("MASTER_ADDR"));
  EXPECT_THAT(env_error({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}), HasSubstr("MASTER_PORT"));
  EXPECT_THAT(env_error({{"MASTER_PORT", "70000"}}), HasSubstr("MASTER_PORT: '70000'"));
  EXPECT_THAT(env_error({{"WEFT_ATTEMPT", "-1"}}), HasSubstr("WEFT_ATTEMPT"));
}

TEST(ProcessGroups, OneRankWorldNeedsNoStore) {
  GroupOptions o;
  o.timeout = std::chrono::seconds(5);
  auto pg = init_process_groups(read_process_env({}), o);
  EXPECT_EQ(pg->store(), nullptr);
  for (auto* c : {pg->world.get(), pg->dp.get(), pg->sp.get(), pg->wp.get(), pg->wdp.get()}) {
    EXPECT_EQ(c->size(), 1);
    EXPECT_EQ(c->rank(), 0);
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

TEST(ProcessGroups, RejectsBadBackendAndGrid) {
  GroupOptions o;
  o.backend = "mpi";
  EXPECT_THAT([&] {
    try { init_process_groups(ProcessEnv{}, o); } catch (const CommError& e) { return std::string(e.what()); }
    return std::string();
  }(), HasSubstr("comm.backend: 'mpi'"));
  o.backend = "gloo";
  o.sp = 2;
  EXPECT_THROW(init_process_groups(ProcessEnv{}, o), CommError);
}

TEST(GlooCommunicator, MisuseThrowsNamingGroupAndOp) {
  auto pg = init_process_groups(ProcessEnv{}, GroupOptions{});
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
}

TEST(GlooCommunicator, RunsCollectivesInIssueOrderOffTheCallerThread) {
  auto pg = init_process_groups(ProcessEnv{}, GroupOptions{});
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
