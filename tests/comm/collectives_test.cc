// Every collective on 1-4 ranks (separate processes, loopback Gloo), on every
// group of the rank grid at once; each rank checks its results against a
// computed reference (tests/comm/comm_rank_main.cc).
#include <gtest/gtest.h>

#include "comm/launch_util.h"

namespace weft::comm::testing {
namespace {

struct GridCase {
  int world, sp, wp;
};

class Collectives : public ::testing::TestWithParam<GridCase> {};

TEST_P(Collectives, MatchReferenceOnEveryGroup) {
  GridCase c = GetParam();
  LaunchSpec spec;
  spec.world = c.world;
  spec.args = {"collectives", std::to_string(c.sp), std::to_string(c.wp)};
  spec.limit_s = 60;
  auto res = launch_ranks(bin_path("weft_comm_rank"), spec);
  for (int r = 0; r < c.world; ++r) {
    EXPECT_EQ(res[r].code, 0) << "rank " << r << " output:\n" << res[r].output;
    EXPECT_NE(res[r].output.find(" 0 failures"), std::string::npos) << res[r].output;
  }
}

INSTANTIATE_TEST_SUITE_P(Grids, Collectives,
                         ::testing::Values(GridCase{1, 1, 1}, GridCase{2, 1, 1}, GridCase{3, 1, 1},
                                           GridCase{3, 3, 1}, GridCase{4, 2, 2}, GridCase{4, 1, 4},
                                           GridCase{4, 2, 1}),
                         [](const auto& info) {
                           return "world" + std::to_string(info.param.world) + "_sp" +
                                  std::to_string(info.param.sp) + "_wp" + std::to_string(info.param.wp);
                         });

}  // namespace
}  // namespace weft::comm::testing
