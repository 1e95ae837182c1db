// Multi-process rendezvous: ranks in random order, a late rank 0, a wrong
// token.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "comm/launch_util.h"

namespace weft::comm::testing {
namespace {

using ::testing::HasSubstr;

TEST(Rendezvous, RanksStartInRandomOrderWithALateRankZero) {
  LaunchSpec spec;
  spec.world = 4;
  spec.args = {"rendezvous"};
  spec.start_order = {1, 2, 3, 0};
  std::mt19937 rng(std::random_device{}());
  std::shuffle(spec.start_order.begin(), spec.start_order.begin() + 3, rng);
  spec.start_delay_ms = {{0, 1500}, {spec.start_order[1], 300}};
  auto res = launch_ranks(bin_path("weft_comm_rank"), spec);
  for (int r = 0; r < spec.world; ++r) {
    EXPECT_EQ(res[r].code, 0) << "rank " << r << ":\n" << res[r].output;
    EXPECT_THAT(res[r].output, HasSubstr("sum of ranks 6"));
  }
}

TEST(Rendezvous, WrongTokenIsRejectedWithAClearError) {
  LaunchSpec spec;
  spec.world = 2;
  spec.args = {"rendezvous"};
  spec.env_by_rank[1]["WEFT_RDZV_TOKEN"] = "not-the-token";
  // Rank 0 then waits for rank 1 until its rendezvous timeout (20 s).
  spec.kill_when_others_exit = {0};
  auto res = launch_ranks(bin_path("weft_comm_rank"), spec);
  EXPECT_NE(res[1].code, 0);
  EXPECT_LT(res[1].seconds, 5) << "a rejected token must fail fast";
  EXPECT_THAT(res[1].output, HasSubstr("rejected this rank's token"));
}

TEST(Rendezvous, TheStoreRefusesNewcomersOnceTheGangFormedAndKeepsServingIt) {
  LaunchSpec spec;
  spec.world = 2;
  spec.args = {"formed"};
  auto res = launch_ranks(bin_path("weft_comm_rank"), spec);
  for (int r = 0; r < spec.world; ++r) {
    EXPECT_EQ(res[r].code, 0) << "rank " << r << ":\n" << res[r].output;
    EXPECT_THAT(res[r].output, HasSubstr("after formation: sum of ranks 1"));
  }
  EXPECT_THAT(res[0].output, HasSubstr("late client refused"));
  EXPECT_THAT(res[0].output, HasSubstr("already formed"));
}

}  // namespace
}  // namespace weft::comm::testing
