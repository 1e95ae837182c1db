// Every collective on 1-4 ranks (separate processes, loopback Gloo), on every
// group of the rank grid at once; each rank checks its results against a
// computed reference (tests/comm/comm_rank_main.cc,
// support/collective_checks.h).
#include <gtest/gtest.h>

#include "comm/launch_util.h"
#include "support/collective_checks.h"

namespace weft::comm::testing {
namespace {

using weft::testing::CollectiveGrid;

class Collectives : public ::testing::TestWithParam<CollectiveGrid> {};

TEST_P(Collectives, MatchReferenceOnEveryGroup) {
  CollectiveGrid c = GetParam();
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

INSTANTIATE_TEST_SUITE_P(Grids, Collectives, ::testing::ValuesIn(weft::testing::collective_grids()),
                         [](const auto& info) { return weft::testing::grid_name(info.param); });

}  // namespace
}  // namespace weft::comm::testing
