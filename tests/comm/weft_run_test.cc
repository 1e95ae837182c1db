// weft-run: environment contract, line prefixes, gang exit-code propagation
// and signal forwarding, with a shell stand-in worker and with real ranks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm/launch_util.h"

namespace weft::comm::testing {
namespace {

using ::testing::HasSubstr;

std::string fake() { return std::string(WEFT_SOURCE_DIR) + "/tests/comm/fake_worker.sh"; }

TEST(WeftRun, GivesEachRankTheEnvironmentContractAndPrefixesLines) {
  auto r = run_command({bin_path("weft-run"), "-n", "2", "--worker", fake(), "env", "--x", "1"}, 20);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[rank 0] RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="));
  EXPECT_THAT(r.output, HasSubstr("[rank 1] RANK=1 WORLD_SIZE=2"));
  EXPECT_THAT(r.output, HasSubstr("TOKEN=set"));
  EXPECT_THAT(r.output, HasSubstr("ARGS=env --x 1"));
  EXPECT_THAT(r.output, HasSubstr("[rank 1] no newline at end\n"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("OMP=0")));
}

TEST(WeftRun, KeepsUserThreadSettings) {
  auto r = run_command({bin_path("weft-run"), "-n", "1", "--worker", fake(), "env"}, 20, {{"OMP_NUM_THREADS", "7"}});
  EXPECT_THAT(r.output, HasSubstr("OMP=7"));
}

TEST(WeftRun, FailingRankStopsTheGangAndItsCodeIsReturned) {
  auto r = run_command({bin_path("weft-run"), "-n", "3", "--worker", fake(), "fail", "1", "7"}, 30);
  EXPECT_EQ(r.code, 7) << r.output;
  EXPECT_LT(r.seconds, 8) << "the other ranks must be stopped, not waited for";
  EXPECT_THAT(r.output, HasSubstr("[rank 1] rank 1 failing"));
  EXPECT_THAT(r.output, HasSubstr("rank 1 exited with code 7"));
  EXPECT_THAT(r.output, HasSubstr("[rank 0] got SIGTERM"));
  EXPECT_THAT(r.output, HasSubstr("[rank 2] got SIGTERM"));
}

TEST(WeftRun, ForwardsSigtermAndExitsWithTheRanksCode) {
  auto r = run_command({bin_path("weft-run"), "-n", "2", "--worker", fake(), "trap"}, 30, {}, 1.0);
  EXPECT_EQ(r.code, 143) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[rank 0] got SIGTERM"));
  EXPECT_THAT(r.output, HasSubstr("[rank 1] got SIGTERM"));
  EXPECT_LT(r.seconds, 8);
}

TEST(WeftRun, MissingWorkerIsABadConfig) {
  auto r = run_command({bin_path("weft-run"), "-n", "2", "--worker", "/nonexistent/worker", "x.yaml"}, 10);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.output, HasSubstr("'/nonexistent/worker' is not executable"));
}

TEST(WeftRun, RunsRealRanksThroughTheRendezvous) {
  auto r = run_command({bin_path("weft-run"), "-n", "3", "--worker", bin_path("weft_comm_rank"), "--", "rendezvous"}, 40);
  EXPECT_EQ(r.code, 0) << r.output;
  for (int k = 0; k < 3; ++k)
    EXPECT_THAT(r.output, HasSubstr("[rank " + std::to_string(k) + "] rank " + std::to_string(k) + " of 3: sum of ranks 3"));
}

TEST(WeftRun, KilledRealRankStopsTheGangWithItsCode) {
  auto r = run_command({bin_path("weft-run"), "-n", "3", "--worker", bin_path("weft_comm_rank"), "die", "2", "2000"}, 40);
  EXPECT_EQ(r.code, 128 + 9) << r.output;  // SIGKILL, reported as 128+9 like a shell
  EXPECT_THAT(r.output, HasSubstr("rank 2 exited with code 137"));
  EXPECT_LT(r.seconds, 10);
}

}  // namespace
}  // namespace weft::comm::testing
