// What weft-run forwards of its ranks' output, through the real programs:
// every rank of a gang given a bad config fails at once, and weft-run
// answers the first failure with SIGTERM to the others. A rank's error line
// is whole, never cut after "bad config: ".
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>

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

}  // namespace
