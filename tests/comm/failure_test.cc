// A killed or hung rank makes every other rank exit with code 3 within the
// collective deadline, with a message naming step, op, group and label.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm/launch_util.h"

namespace weft::comm::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kDeadlineMs = 2000;

TEST(Failure, KilledRankMakesEveryOtherRankExit3) {
  LaunchSpec spec;
  spec.world = 3;
  spec.args = {"die", "1", std::to_string(kDeadlineMs)};
  spec.limit_s = 30;
  auto res = launch_ranks(bin_path("weft_comm_rank"), spec);
  EXPECT_EQ(res[1].code, 128 + 9);
  for (int r : {0, 2}) {
    EXPECT_EQ(res[r].code, 3) << "rank " << r << ":\n" << res[r].output;
    EXPECT_THAT(res[r].output, HasSubstr("op all_reduce, group world, bucket 0"));
    EXPECT_THAT(res[r].output, HasSubstr("step 1"));
    // A dead peer closes its sockets: detected well before the deadline.
    EXPECT_LT(res[r].seconds, 15);
  }
}

TEST(Failure, HungRankMakesEveryOtherRankTimeOutWithExit3) {
  LaunchSpec spec;
  spec.world = 3;
  spec.args = {"hang", "2", std::to_string(kDeadlineMs)};
  spec.limit_s = 20;
  spec.kill_when_others_exit = {2};  // the hung rank itself never exits
  auto res = launch_ranks(bin_path("weft_comm_rank"), spec);
  for (int r : {0, 1}) {
    EXPECT_EQ(res[r].code, 3) << "rank " << r << ":\n" << res[r].output;
    EXPECT_THAT(res[r].output, HasSubstr("op all_reduce, group world, bucket 0"));
    EXPECT_THAT(res[r].output, ::testing::AnyOf(HasSubstr("collective timeout"), HasSubstr("peer lost")));
    // Deadline plus the watchdog grace plus start-up, never a hang.
    EXPECT_LT(res[r].seconds, 2 + kDeadlineMs / 1000.0 + 4);
  }
  EXPECT_EQ(res[2].code, -1);
}

}  // namespace
}  // namespace weft::comm::testing

namespace weft::comm::testing {
namespace {

// With lanes every step keeps a collective in flight on every lane (a bucket
// per bulk lane and a small one on the express lane): a dead or hung peer
// must still end every rank with exit 3 within the deadline, whichever lane
// notices first.
class FailureWithLanes : public ::testing::TestWithParam<int> {};

TEST_P(FailureWithLanes, KilledRankMakesEveryLaneExit3) {
  LaunchSpec spec;
  spec.world = 3;
  spec.args = {"die", "1", std::to_string(kDeadlineMs), std::to_string(GetParam())};
  spec.limit_s = 30;
  auto res = launch_ranks(bin_path("weft_comm_rank"), spec);
  EXPECT_EQ(res[1].code, 128 + 9);
  for (int r : {0, 2}) {
    EXPECT_EQ(res[r].code, 3) << "rank " << r << ":\n" << res[r].output;
    EXPECT_THAT(res[r].output, HasSubstr("op all_reduce, group world, bucket "));
    EXPECT_THAT(res[r].output, HasSubstr("step 1"));
    EXPECT_LT(res[r].seconds, 15);
  }
}

TEST_P(FailureWithLanes, HungRankMakesEveryLaneTimeOutWithExit3) {
  LaunchSpec spec;
  spec.world = 3;
  spec.args = {"hang", "2", std::to_string(kDeadlineMs), std::to_string(GetParam())};
  spec.limit_s = 20;
  spec.kill_when_others_exit = {2};
  auto res = launch_ranks(bin_path("weft_comm_rank"), spec);
  for (int r : {0, 1}) {
    EXPECT_EQ(res[r].code, 3) << "rank " << r << ":\n" << res[r].output;
    EXPECT_THAT(res[r].output, HasSubstr("op all_reduce, group world, bucket "));
    EXPECT_THAT(res[r].output, ::testing::AnyOf(HasSubstr("collective timeout"), HasSubstr("peer lost")));
    EXPECT_LT(res[r].seconds, 2 + kDeadlineMs / 1000.0 + 4);
  }
  EXPECT_EQ(res[2].code, -1);
}

INSTANTIATE_TEST_SUITE_P(Lanes, FailureWithLanes, ::testing::Values(2, 4),
                         [](const auto& info) { return "lanes" + std::to_string(info.param); });

}  // namespace
}  // namespace weft::comm::testing
