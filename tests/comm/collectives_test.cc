// Every collective on 1-4 ranks (separate processes, loopback Gloo), on every
// group of the rank grid at once, with 1, 2 and 4 Gloo lanes; each rank checks
// its results against a computed reference, exactly (tests/comm/
// comm_rank_main.cc, support/collective_checks.h). Lanes must not change a bit.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "comm/launch_util.h"
#include "support/collective_checks.h"

namespace weft::comm::testing {
namespace {

using weft::testing::CollectiveGrid;

// Runs `world` weft_comm_rank processes with `args`; each must exit 0 and
// report no failure.
void expect_every_rank_passes(int world, const std::vector<std::string>& args) {
  LaunchSpec spec;
  spec.world = world;
  spec.args = args;
  spec.limit_s = 60;
  auto res = launch_ranks(bin_path("weft_comm_rank"), spec);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(res[r].code, 0) << "rank " << r << " output:\n" << res[r].output;
    EXPECT_NE(res[r].output.find(" 0 failures"), std::string::npos) << res[r].output;
  }
}

class Collectives : public ::testing::TestWithParam<std::tuple<CollectiveGrid, int>> {};

TEST_P(Collectives, MatchReferenceOnEveryGroup) {
  auto [c, lanes] = GetParam();
  expect_every_rank_passes(c.world, {"collectives", std::to_string(c.sp), std::to_string(c.wp), std::to_string(lanes)});
}

INSTANTIATE_TEST_SUITE_P(Grids, Collectives,
                         ::testing::Combine(::testing::ValuesIn(weft::testing::collective_grids()),
                                            ::testing::Values(1, 2, 4)),
                         [](const auto& info) {
                           return weft::testing::grid_name(std::get<0>(info.param)) + "_lanes" +
                                  std::to_string(std::get<1>(info.param));
                         });

// The same checks through host staging (comm/staged_communicator.h: CUDA
// tensors over Gloo), the device side faked with host memory whose copies
// land late: every result must still be exact, in place and uneven included,
// and the second round must reuse the first round's host buffers.
class Staged : public ::testing::TestWithParam<std::tuple<CollectiveGrid, int>> {};

TEST_P(Staged, MatchReferenceThroughHostMemory) {
  auto [c, lanes] = GetParam();
  expect_every_rank_passes(c.world, {"staged", std::to_string(c.sp), std::to_string(c.wp), std::to_string(lanes)});
}

INSTANTIATE_TEST_SUITE_P(Grids, Staged,
                         ::testing::Combine(::testing::Values(CollectiveGrid{2, 1, 1}, CollectiveGrid{4, 2, 2}),
                                            ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return weft::testing::grid_name(std::get<0>(info.param)) + "_lanes" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Collectives on overlapping memory issued back to back land on different
// lanes; each must still see the result of the one issued before it.
class Ordering : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(Ordering, OverlappingCollectivesKeepIssueOrderAcrossLanes) {
  auto [world, lanes] = GetParam();
  expect_every_rank_passes(world, {"ordering", std::to_string(lanes)});
}

// The same through host staging: a collective on memory an earlier one's copy
// back writes must see that result (CUDA tensors over Gloo).
TEST_P(Ordering, OverlappingStagedCollectivesKeepIssueOrder) {
  auto [world, lanes] = GetParam();
  expect_every_rank_passes(world, {"staged_ordering", std::to_string(lanes)});
}

// Staged collectives issued while work queued on the compute stream before
// them still writes their buffers: the copy out reads what it wrote, and the
// copy back lands after it, a broadcast's receivers (nothing copied out)
// included.
TEST_P(Ordering, StagedCollectivesWaitForComputeQueuedBeforeThem) {
  auto [world, lanes] = GetParam();
  expect_every_rank_passes(world, {"staged_compute_order", std::to_string(lanes)});
}

// A staged communicator destroyed while its collectives are still queued
// (unwaited Works, as when an exception unwinds a step): the Gloo lanes run
// them as it goes, from host memory the pool still holds.
TEST_P(Ordering, StagedTeardownRunsQueuedCollectivesBeforeFreeingHostMemory) {
  auto [world, lanes] = GetParam();
  expect_every_rank_passes(world, {"staged_teardown", std::to_string(lanes)});
}

INSTANTIATE_TEST_SUITE_P(Lanes, Ordering,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values(1, 2, 4)),
                         [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_lanes" +
                                  std::to_string(std::get<1>(info.param));
                         });

// A tiny collective (the loss, the step agreement) issued after a bucket that
// the emulated network (comm.simulate) makes take 1.5 s: with lanes it takes
// the express lane and returns while the bucket is still in flight; with one
// lane it waits behind it (the check the scenario makes flips).
class Express : public ::testing::TestWithParam<int> {};

TEST_P(Express, SmallCollectiveDoesNotWaitBehindABucket) {
  expect_every_rank_passes(2, {"express", std::to_string(GetParam())});
}

INSTANTIATE_TEST_SUITE_P(Lanes, Express, ::testing::Values(1, 2),
                         [](const auto& info) { return "lanes" + std::to_string(info.param); });

}  // namespace
}  // namespace weft::comm::testing
