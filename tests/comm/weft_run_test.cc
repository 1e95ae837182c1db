// weft-run: environment contract, line prefixes, gang exit-code propagation
// and signal forwarding, with a shell stand-in worker and with real ranks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "comm/launch_util.h"
#include "support/net.h"

namespace weft::comm::testing {
namespace {

using ::testing::HasSubstr;

std::string fake() { return std::string(WEFT_SOURCE_DIR) + "/tests/comm/fake_worker.sh"; }

TEST(WeftRun, GivesEachRankTheEnvironmentContractAndPrefixesLines) {
  auto r = run_command({bin_path("weft-run"), "-n", "2", "--worker", fake(), "env", "--x", "1"}, 20);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[rank 0] RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="));
  EXPECT_THAT(r.output, HasSubstr("[rank 1] RANK=1 WORLD_SIZE=2"));
  EXPECT_THAT(r.output, HasSubstr("[rank 1] LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 NODE_RANK=0"));
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

// The in-pod launcher of spec.procsPerPod: launcher K of M starts ranks
// K·N .. K·N+N-1 of M·N, with its own LOCAL_RANKs and NODE_RANK K.
TEST(WeftRun, OneOfSeveralLaunchersGivesItsRanksTheirGlobalNumbers) {
  auto r = run_command({bin_path("weft-run"), "-n", "2", "--nnodes", "3", "--node-rank", "1", "--master-addr",
                        "job-0.job.ns.svc", "--master-port", "29511", "--worker", fake(), "env"},
                       20, {{"WEFT_RDZV_TOKEN", "secret"}});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[rank 2] RANK=2 WORLD_SIZE=6 MASTER_ADDR=job-0.job.ns.svc MASTER_PORT=29511"));
  EXPECT_THAT(r.output, HasSubstr("[rank 2] LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 NODE_RANK=1"));
  EXPECT_THAT(r.output, HasSubstr("[rank 3] RANK=3 WORLD_SIZE=6"));
  EXPECT_THAT(r.output, HasSubstr("[rank 3] LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 NODE_RANK=1"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("[rank 0]")));
}

// --from-env: the same launcher with the gang read from the launch
// environment a pod already carries (the operator's pods run it so).
TEST(WeftRun, FromEnvTakesTheGangFromTheLaunchEnvironment) {
  const std::string run = bin_path("weft-run");
  const std::map<std::string, std::string> pod = {
      {"WEFT_RDZV_TOKEN", "secret"}, {"WORLD_SIZE", "6"},          {"LOCAL_WORLD_SIZE", "2"},
      {"NODE_RANK", "1"},            {"MASTER_ADDR", "job-0.job.ns.svc"}, {"MASTER_PORT", "29511"}};
  auto r = run_command({run, "--from-env", "--worker", fake(), "env"}, 20, pod);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[rank 2] RANK=2 WORLD_SIZE=6 MASTER_ADDR=job-0.job.ns.svc MASTER_PORT=29511"));
  EXPECT_THAT(r.output, HasSubstr("[rank 2] LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 NODE_RANK=1"));
  EXPECT_THAT(r.output, HasSubstr("[rank 3] LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 NODE_RANK=1"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("[rank 0]")));
  // What it cannot read is named; the flags that say the same do not mix with it.
  auto unset = run_command({run, "--from-env", "--worker", fake(), "env"}, 10,
                           {{"WEFT_RDZV_TOKEN", "secret"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", ""},
                            {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29511"}});
  EXPECT_EQ(unset.code, 1);
  EXPECT_THAT(unset.output, HasSubstr("--from-env needs WORLD_SIZE and LOCAL_WORLD_SIZE set"));
  auto uneven = run_command({run, "--from-env", "--worker", fake(), "env"}, 10,
                            {{"WEFT_RDZV_TOKEN", "secret"}, {"WORLD_SIZE", "5"}, {"LOCAL_WORLD_SIZE", "2"},
                             {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29511"}});
  EXPECT_EQ(uneven.code, 1);
  EXPECT_THAT(uneven.output, HasSubstr("WORLD_SIZE 5 is not a multiple of LOCAL_WORLD_SIZE 2"));
  auto mixed = run_command({run, "--from-env", "-n", "2", "--worker", fake(), "env"}, 10, pod);
  EXPECT_EQ(mixed.code, 1) << mixed.output;
  auto neither = run_command({run, "--worker", fake(), "env"}, 10, {});
  EXPECT_EQ(neither.code, 1);
  EXPECT_THAT(neither.output, HasSubstr("-n/--nproc or --from-env is required"));
}

// A failing rank of launcher 1 is named by its global rank, and its code is
// the launcher's (what fails the pod and restarts the gang).
TEST(WeftRun, OneOfSeveralLaunchersExitsWithItsFailedRanksCode) {
  auto r = run_command({bin_path("weft-run"), "-n", "2", "--nnodes", "2", "--node-rank", "1", "--master-port", "29511",
                        "--worker", fake(), "fail", "3", "7"},
                       30, {{"WEFT_RDZV_TOKEN", "secret"}});
  EXPECT_EQ(r.code, 7) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[rank 3] rank 3 failing"));
  EXPECT_THAT(r.output, HasSubstr("weft-run: rank 3 exited with code 7"));
  EXPECT_THAT(r.output, HasSubstr("[rank 2] got SIGTERM"));
}

TEST(WeftRun, SeveralLaunchersNeedOneNodeRankBelowNnodesAPortAndAToken) {
  const std::string run = bin_path("weft-run");
  auto no_port = run_command({run, "-n", "2", "--nnodes", "2", "--worker", fake(), "env"}, 10,
                             {{"WEFT_RDZV_TOKEN", "secret"}});
  EXPECT_EQ(no_port.code, 1);
  EXPECT_THAT(no_port.output, HasSubstr("--nnodes 2 needs --master-port"));
  auto no_token = run_command({run, "-n", "2", "--nnodes", "2", "--master-port", "29511", "--worker", fake(), "env"},
                              10, {{"WEFT_RDZV_TOKEN", ""}});
  EXPECT_EQ(no_token.code, 1);
  EXPECT_THAT(no_token.output, HasSubstr("needs WEFT_RDZV_TOKEN"));
  auto past = run_command({run, "-n", "2", "--nnodes", "2", "--node-rank", "2", "--master-port", "29511", "--worker",
                           fake(), "env"},
                          10, {{"WEFT_RDZV_TOKEN", "secret"}});
  EXPECT_EQ(past.code, 1);
  EXPECT_THAT(past.output, HasSubstr("--node-rank 2 is not below --nnodes 2"));
}

// Two launchers of two ranks each meet at launcher 0's store: the same
// rendezvous as one launcher of four.
TEST(WeftRun, TwoLaunchersOfTwoRanksFormOneGangOfFour) {
  const std::string port = std::to_string(weft::testing::free_port());
  RankResult node[2];
  std::thread t[2];
  for (int k = 0; k < 2; ++k)
    t[k] = std::thread([&, k] {
      node[k] = run_command({bin_path("weft-run"), "-n", "2", "--nnodes", "2", "--node-rank", std::to_string(k),
                             "--master-port", port, "--worker", bin_path("weft_comm_rank"), "--", "rendezvous"},
                            60, {{"WEFT_RDZV_TOKEN", "shared-secret"}});
    });
  for (auto& th : t) th.join();
  for (int k = 0; k < 2; ++k) {
    ASSERT_EQ(node[k].code, 0) << node[k].output;
    for (int l = 0; l < 2; ++l) {
      const int rank = 2 * k + l;
      EXPECT_THAT(node[k].output, HasSubstr("[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) +
                                             " of 4: sum of ranks 6"));
    }
  }
}

}  // namespace
}  // namespace weft::comm::testing
