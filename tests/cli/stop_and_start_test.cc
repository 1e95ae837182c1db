// How ranks start and stop, probed as a careless or hostile user would
// through the real weft-worker and weft-run: ranks given different
// checkpoints refuse to train together; files that are FIFOs, devices or
// huge (init_from's config.json and weights, the bucket-cap file) are
// refused or ignored by name instead of hanging a rank or filling its log;
// a rank that failed keeps its own exit code when the launcher's SIGTERM
// follows; weft-run's --grace takes only a sane number of seconds.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "support/net.h"
#include "cli/cli_util.h"
#include "support/run_process.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using weft::testing::fresh_dir;
using weft::testing::has;
using weft::testing::run_process;
using weft::testing::seconds_since;
using weft::testing::write_file;
const std::string kWorker = weft::testing::bin("weft-worker");
const std::string kRun = weft::testing::bin("weft-run");

const char* const kSmall = weft::cli_test::kSmallModel;

// ---- ranks agree on where they start ---------------------------------------

// Rank 0 finds a step-6 checkpoint, rank 1 (another node's disk, a stale
// volume) none: before the fix they trained in lock-step at steps 7-10 and
// 1-4 and exited 0. Each now stops before the first step, exit 4, naming
// both ranks' start points; nothing is trained or written.
TEST(StartAgreement, RanksWithDifferentCheckpointsStopNamingBoth) {
  const fs::path d = fresh_dir("agree");
  const std::string cfg = write_file(d / "c.yaml", std::string(kSmall) + "checkpoint: {every: 3}\n");
  auto first = run_process({kRun, "-n", "2", cfg, "--out", (d / "a").string(), "--steps", "6"}, {}, 0, "", 120s);
  ASSERT_EQ(first.code, 0) << first.output;
  fs::create_directories(d / "empty");
  const std::string port = std::to_string(weft::testing::free_port());
  auto rank = [&](int r, const fs::path& ckpt, weft::testing::ProcessResult* out) {
    *out = run_process({kWorker, cfg, "--out", (d / ("out" + std::to_string(r))).string(), "--steps", "10"},
                       {"RANK=" + std::to_string(r), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port,
                        "WEFT_CHECKPOINT_DIR=" + ckpt.string()},
                       0, "", 120s);
  };
  weft::testing::ProcessResult r0, r1;
  std::thread t0([&] { rank(0, d / "a" / "checkpoints", &r0); });
  rank(1, d / "empty", &r1);
  t0.join();
  for (const auto* r : {&r0, &r1}) {
    EXPECT_EQ(r->code, 4) << r->output;
    EXPECT_TRUE(has(r->output, "the ranks would resume from different checkpoints (rank 0: step 6 (checkpoint "))
        << r->output;
    EXPECT_TRUE(has(r->output, "rank 1: no checkpoint (step 0))")) << r->output;
    EXPECT_FALSE(has(r->output, "step 7/10")) << r->output;
    EXPECT_FALSE(has(r->output, "step 1/10")) << r->output;
  }
  EXPECT_TRUE(has(r0.output, "this rank read " + (d / "a" / "checkpoints").string())) << r0.output;
  EXPECT_TRUE(fs::is_empty(d / "empty")) << "rank 1 wrote a checkpoint";
  // The same checkpoint on both: they resume together.
  auto again = run_process({kRun, "-n", "2", cfg, "--out", (d / "a").string(), "--steps", "8"}, {}, 0, "", 120s);
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_TRUE(has(again.output, "resumed from")) << again.output;
  fs::remove_all(d);
}

// ---- files that would block or never end ------------------------------------

// A FIFO as init_from's config.json or model.safetensors: the open used to
// wait for a writer forever (and SIGTERM only asked for a checkpoint). Now
// refused at once, exit 1, naming the file.
TEST(BlockingFiles, FifoInInitFromIsRefusedNamingIt) {
  const fs::path d = fresh_dir("fifo-init");
  const std::string cfg = write_file(d / "c.yaml", kSmall);
  auto src = run_process({kWorker, cfg, "--out", (d / "src").string(), "--steps", "2"}, {}, 0, "", 120s);
  ASSERT_EQ(src.code, 0) << src.output;
  const fs::path model = d / "src" / "checkpoints" / "step-2";
  for (const char* name : {"config.json", "model.safetensors"}) {
    SCOPED_TRACE(name);
    const fs::path hf = d / (std::string("hf-") + name);
    fs::copy(model, hf, fs::copy_options::recursive);
    fs::remove(hf / name);
    ASSERT_EQ(::mkfifo((hf / name).c_str(), 0600), 0);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run_process({kWorker, cfg, "--out", (d / "out").string(), "--init-from", hf.string()}, {}, 0, "", 60s);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_TRUE(has(r.output, (hf / name).string() + ": not a regular file (a FIFO)")) << r.output;
    EXPECT_LT(seconds_since(t0), 30) << r.output;
  }
  fs::remove_all(d);
}

// The bucket-cap file is polled before every step: a FIFO would block rank
// 0, /dev/zero or a huge file would grow its memory and go whole into the
// log. Each is refused once by name, the cap in force stays, training ends.
TEST(BlockingFiles, BucketCapFileThatIsNotASmallFileIsIgnoredByName) {
  const fs::path d = fresh_dir("capfile");
  const fs::path fifo = d / "cap-fifo", huge = d / "cap-huge";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  { std::ofstream(huge) << "8\n"; }
  fs::resize_file(huge, 300'000'000);  // sparse: a 300 MB file
  struct Case {
    std::string path, why;
  } cases[] = {{fifo.string(), "not a regular file (a FIFO)"},
               {"/dev/zero", "not a regular file (a character device)"},
               {huge.string(), "300000000 bytes, more than the 4096 such a file may have"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    const std::string cfg = write_file(
        d / "c.yaml", std::string(kSmall) + "parallel: {bucket_cap_mb: 1, bucket_cap_file: '" + c.path + "'}\n");
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run_process({kRun, "-n", "2", cfg, "--out", (d / "out").string(), "--no-resume", "--steps", "4"}, {}, 0,
                         "", 120s);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(has(r.output, c.path + ": " + c.why + "; keeping the current bucket cap")) << r.output;
    EXPECT_LT(r.output.size(), 64u * 1024) << "the file went into the log";
    EXPECT_LT(seconds_since(t0), 90);
  }
  fs::remove_all(d);
}

// ---- the first failure's own reason ------------------------------------------

// Rank 0 cannot write its checkpoint directory (exit 4). Leaving the job
// closes its connections, rank 1 exits 3 at once, and weft-run's SIGTERM
// used to reach rank 0 while it was still exiting: it died with 143 and the
// job said 3. Repeated, since it was a race.
TEST(OwnReason, AnUnwritableCheckpointDirIsExitFourThroughWeftRun) {
  const fs::path d = fresh_dir("ownreason");
  write_file(d / "file", "not a directory\n");
  const std::string cfg = write_file(
      d / "c.yaml", std::string(kSmall) + "checkpoint: {dir: '" + (d / "file" / "ckpt").string() + "'}\n");
  for (int i = 0; i < 3; ++i) {
    auto r = run_process({kRun, "-n", "2", cfg, "--out", (d / "out").string(), "--steps", "4"}, {}, 0, "", 120s);
    EXPECT_EQ(r.code, 4) << r.output;
    EXPECT_TRUE(has(r.output, "checkpoint.dir " + (d / "file" / "ckpt").string())) << r.output;
  }
  fs::remove_all(d);
}

// ---- weft-run --grace ----------------------------------------------------------

TEST(WeftRunGrace, OnlyAFiniteNumberOfSecondsIsTaken) {
  for (const char* bad : {"nan", "inf", "1e300", "10s"}) {
    SCOPED_TRACE(bad);
    auto r = run_process({kRun, "-n", "1", "--grace", bad, "--worker", "/bin/true"});
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_TRUE(has(r.output, std::string("--grace: '") + bad + "' is not a number of seconds from 0 to 86400"))
        << r.output;
  }
  auto ok = run_process({kRun, "-n", "1", "--grace", "2.5", "--worker", "/bin/true"});
  EXPECT_EQ(ok.code, 0) << ok.output;
}

}  // namespace
