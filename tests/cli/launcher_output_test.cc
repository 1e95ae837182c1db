// What weft-run forwards of its ranks' output, through the real programs:
// every rank of a gang given a bad config fails at once, and weft-run
// answers the first failure with SIGTERM to the others. A rank's error line
// is whole, never cut after "bad config: ".
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "support/run_process.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using weft::testing::fresh_dir;
using weft::testing::has;
using weft::testing::run_process;
using weft::testing::write_file;
const std::string kRun = weft::testing::bin("weft-run");

// The worker wrote its last words in three pieces (std::cerr is
// unbuffered); the launcher's SIGTERM, sent when the first rank exited,
// landed between them and ended a rank after "bad config: ". With 8 ranks,
// about one run in two lost a line that way; 10 runs make it certain.
TEST(LauncherOutput, EveryRanksBadConfigLineIsWholeWhenTheGangStops) {
  const fs::path d = fresh_dir("whole-lines");
  const std::string cfg = write_file(d / "bad.yaml", "model: {d_model: 33}\nmetrics: {port: 0}\n");
  const std::string reason = "model.n_heads: 4 does not divide model.d_model 33";
  int rank_lines = 0;
  for (int run = 0; run < 10; ++run) {
    const auto r = run_process({kRun, "-n", "8", cfg}, {}, 0, "", 60s);
    ASSERT_EQ(r.code, 1) << r.output;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) {
      if (!has(line, "] weft-worker: bad config: ")) continue;
      ++rank_lines;
      EXPECT_TRUE(has(line, reason)) << "cut line in run " << run << ": '" << line << "'\n" << r.output;
    }
  }
  EXPECT_GE(rank_lines, 10) << "every run has at least the failing rank's line";
  fs::remove_all(d);
}

// A directory is searchable, so access(X_OK) took it for a program and
// every rank's exec failed with 127: now exit 1 naming it, before any rank.
TEST(LauncherOutput, AWorkerThatIsADirectoryIsRefusedByName) {
  const fs::path d = fresh_dir("worker-dir");
  const auto r = run_process({kRun, "-n", "2", "--worker", d.string(), "--", "x.yaml"}, {}, 0, "", 30s);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "worker program '" + d.string() + "' is not a program file")) << r.output;
  EXPECT_FALSE(has(r.output, "cannot exec")) << r.output;
  fs::remove_all(d);
}

// The pid of the process whose command line holds `marker` and whose
// environment has RANK=`rank`: a rank weft-run started.
int rank_pid(const std::string& marker, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto slurp = [&](const char* what) {
      std::ifstream in(e.path() / what, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      return ss.str();
    };
    const std::string cmd = slurp("cmdline");
    if (cmd.find(marker) == std::string::npos || cmd.find("weft-worker") == std::string::npos) continue;
    const std::string env = slurp("environ");
    if (env.find(std::string("\0RANK=") + std::to_string(rank) + '\0') != std::string::npos ||
        env.rfind("RANK=" + std::to_string(rank) + '\0', 0) == 0)
      return std::stoi(name);
  }
  return 0;
}

// Ctrl-C in one rank's terminal (SIGINT to that rank alone): every rank stops
// at the next step boundary with a checkpoint, and the job's code is the one
// of the signal that asked, 130. The other rank exits 143 ("another rank was
// asked to stop") and weft-run's SIGTERM reaches the first one too: either
// used to make the job's code 143.
TEST(LauncherOutput, SigintToOneRankEndsTheJobWith130) {
  const fs::path d = fresh_dir("sigint-one");
  const std::string cfg = write_file(d / "c.yaml", "model: {vocab_size: 64, d_model: 32, n_layers: 1, n_heads: 2, "
                                                   "max_seq_len: 16}\n"
                                                   "train: {steps: 1000000, seq_len: 16, micro_batch: 2, log_every: 1}\n"
                                                   "metrics: {port: 0}\ncheckpoint: {every: 0}\n");
  const fs::path out = d / "out";
  weft::testing::ProcessResult job;
  std::thread t([&] { job = run_process({kRun, "-n", "2", cfg, "--out", out.string()}, {}, 0, "", 120s); });
  int pid = 0;
  for (int i = 0; i < 600 && pid == 0; ++i) {
    std::this_thread::sleep_for(100ms);
    pid = rank_pid(out.string(), 1);
  }
  ASSERT_GT(pid, 0) << "rank 1 never started";
  std::this_thread::sleep_for(2s);  // into training
  ::kill(pid, SIGINT);
  t.join();
  EXPECT_EQ(job.code, 130) << job.output;
  EXPECT_TRUE(has(job.output, "stopped by signal 2 at step ")) << job.output;
  EXPECT_TRUE(fs::exists(out / "checkpoints" / "latest")) << job.output;
  fs::remove_all(d);
}

}  // namespace
