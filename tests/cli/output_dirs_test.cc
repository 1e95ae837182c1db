// Where a run writes, checked at start-up as a user meets it: a checkpoint
// directory that cannot be created or has no room fails the run before its
// first step (exit 4, naming the field and the directory) instead of at the
// first checkpoint, and the leftovers of interrupted checkpoint writes are
// removed at start-up while complete checkpoints stay.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "support/run_process.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using weft::testing::fresh_dir;
using weft::testing::run_process;
using weft::testing::write_file;
const std::string kWorker = weft::testing::bin("weft-worker");

// checkpoint.every 0: before the start-up check the only checkpoint was the
// one after the last step, so a bad directory cost the whole run.
const char* kRun =
    "train: {steps: 40, seq_len: 16, micro_batch: 2, log_every: 1}\ndata: {branching: 3}\n"
    "metrics: {port: 0}\ncheckpoint: {every: 0}\n";

TEST(OutputDirs, AnUncreatableCheckpointDirFailsBeforeTheFirstStep) {
  const fs::path d = fresh_dir("ckptbad");
  write_file(d / "not-a-dir", "a regular file\n");
  const std::string cfg = write_file(d / "c.yaml", kRun);
  const std::string bad = (d / "not-a-dir/ckpt").string();
  auto r = run_process({kWorker, cfg, "--out", (d / "out").string(), "--checkpoint-dir", bad});
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("checkpoint.dir " + bad + ": cannot create it"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step 1/40"), std::string::npos) << "trained before failing:\n" << r.output;
  fs::remove_all(d);
}

TEST(OutputDirs, AnUncreatableOutDirFailsBeforeTheFirstStep) {
  const fs::path d = fresh_dir("outbad");
  write_file(d / "not-a-dir", "a regular file\n");
  const std::string cfg = write_file(d / "c.yaml", kRun);
  const std::string bad = (d / "not-a-dir/out").string();
  auto r = run_process({kWorker, cfg, "--out", bad});
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("train.out_dir " + bad + ": cannot create it"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step 1/40"), std::string::npos) << "trained before failing:\n" << r.output;
  fs::remove_all(d);
}

TEST(OutputDirs, AVolumeTooSmallForOneCheckpointFailsBeforeTheFirstStep) {
  // A 100 KiB tmpfs as out_dir, in a private mount namespace.
  if (::geteuid() != 0 || std::system("unshare -m true >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs root and unshare -m to mount a small tmpfs";
  const fs::path d = fresh_dir("ckptsmall");
  fs::create_directories(d / "small");
  const std::string cfg = write_file(d / "c.yaml", kRun);
  const std::string log = (d / "log").string();
  const std::string cmd = "unshare -m sh -c 'mount -t tmpfs -o size=100k weft-small " + (d / "small").string() +
                          " && exec " + kWorker + " " + cfg + " --out " + (d / "small").string() + "' >" + log +
                          " 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(log);
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 4) << out;
  EXPECT_NE(out.find("checkpoint.dir " + (d / "small/checkpoints").string() +
                     ": 0.1 MiB free, but 1 more checkpoint of this model needs about"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("step 1/40"), std::string::npos) << "trained before failing:\n" << out;
  fs::remove_all(d);
}

// Room for two checkpoints of the tiny preset (about 9.3 MiB each). The
// check asks for the checkpoints the directory holds at once: the kept ones
// (checkpoint.keep, but no more than the run writes) and the one being
// written. A run that writes two fits with keep 2 and keep 10 (both used to
// be refused, as if keep + 1 were always written); one that writes four
// with keep 3 holds four at once and is refused, naming keep; keep 1 fits.
TEST(OutputDirs, AVolumeTooSmallForTheKeptCheckpointsFailsNamingKeep) {
  if (::geteuid() != 0 || std::system("unshare -m true >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs root and unshare -m to mount a small tmpfs";
  const fs::path d = fresh_dir("ckptkeep");
  fs::create_directories(d / "small");
  auto run = [&](int steps, int keep) {
    const std::string cfg = write_file(d / "c.yaml", "train: {steps: " + std::to_string(steps) +
                                                         ", seq_len: 16, micro_batch: 2}\n"
                                                         "data: {branching: 3}\nmetrics: {port: 0}\n"
                                                         "checkpoint: {every: 1, keep: " +
                                                         std::to_string(keep) + "}\n");
    const std::string log = (d / "log").string();
    const std::string cmd = "unshare -m sh -c 'mount -t tmpfs -o size=25m weft-keep " + (d / "small").string() +
                            " && exec " + kWorker + " " + cfg + " --out " + (d / "small").string() + "' >" + log +
                            " 2>&1";
    const int status = std::system(cmd.c_str());
    std::ifstream in(log);
    const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, out);
  };
  for (int keep : {2, 10}) {
    auto [code, out] = run(2, keep);
    EXPECT_EQ(code, 0) << "keep " << keep << ":\n" << out;
  }
  auto [code3, out3] = run(4, 3);
  EXPECT_EQ(code3, 4) << out3;
  EXPECT_NE(out3.find("but 4 more checkpoints of this model need about"), std::string::npos) << out3;
  EXPECT_NE(out3.find("at most 4 at once: checkpoint.keep 3 of the 4 this run writes, and the one being written, "
                      "0 there now"),
            std::string::npos)
      << out3;
  auto [code1, out1] = run(4, 1);
  EXPECT_EQ(code1, 0) << out1;
  fs::remove_all(d);
}

TEST(OutputDirs, LeftoversOfInterruptedWritesAreRemovedAndCompleteCheckpointsKept) {
  const fs::path d = fresh_dir("ckptstale");
  const fs::path ckpt = d / "out/checkpoints";
  // What a kill during a write leaves: a staging directory and a half-written
  // pointer file; beside them a complete checkpoint that must survive.
  fs::create_directories(ckpt / ".tmp-step-7-4242");
  write_file(ckpt / ".tmp-step-7-4242/model.safetensors", std::string(1 << 20, 'x'));
  fs::create_directories(ckpt / ".tmp-step-9-shards");
  write_file(ckpt / "latest.tmp", "step-7");
  fs::create_directories(ckpt / "step-5");
  write_file(ckpt / "step-5/keep-me", "complete");
  const std::string cfg = write_file(d / "c.yaml", "train: {steps: 2, seq_len: 16, micro_batch: 2}\n"
                                                   "data: {branching: 3}\nmetrics: {port: 0}\n");
  auto r = run_process({kWorker, cfg, "--out", (d / "out").string(), "--no-resume"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("removed 3 leftovers of interrupted checkpoint writes from " + ckpt.string() +
                          ", 1.0 MiB freed"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(ckpt / ".tmp-step-7-4242"));
  EXPECT_FALSE(fs::exists(ckpt / ".tmp-step-9-shards"));
  EXPECT_FALSE(fs::exists(ckpt / "latest.tmp"));
  EXPECT_TRUE(fs::exists(ckpt / "step-5/keep-me"));
  EXPECT_TRUE(fs::exists(ckpt / "step-2/model.safetensors"));
  fs::remove_all(d);
}

// Two runs started into one directory used to race: the second's start-up
// removed the first's checkpoint staging (exit 4) and both wrote
// summary.json. The first holds train.out_dir and checkpoint.dir; the second
// is refused at once (exit 1), naming the holder, and the first trains on.
TEST(OutputDirs, ASecondRunIntoTheSameDirectoriesIsRefusedNamingTheFirst) {
  const fs::path d = fresh_dir("outlock");
  const std::string cfg = write_file(d / "c.yaml", "train: {steps: 1000000, seq_len: 16, micro_batch: 2, log_every: 1}\n"
                                                   "data: {branching: 3}\nmetrics: {port: 0}\n"
                                                   "checkpoint: {every: 1, keep: 1}\n");
  const fs::path out = d / "out";
  weft::testing::ProcessResult first;
  std::thread t([&] { first = run_process({kWorker, cfg, "--out", out.string(), "--no-resume"}, {}, 0, "", 180s); });
  // The holder's text is written once the lock is taken: "pid N on HOST ...".
  int pid = 0;
  for (int i = 0; i < 1200 && pid == 0; ++i) {
    std::this_thread::sleep_for(100ms);
    std::ifstream in(out / ".weft.lock");
    std::string word;
    if (in >> word && word == "pid") in >> pid;
  }
  // ... and it trains (its first checkpoint is there).
  for (int i = 0; i < 1200 && !fs::exists(out / "checkpoints" / "latest"); ++i) std::this_thread::sleep_for(100ms);
  ASSERT_GT(pid, 0) << "the first run never took its lock";
  const auto second = run_process({kWorker, cfg, "--out", out.string(), "--steps", "2", "--no-resume"}, {}, 0, "", 60s);
  ::kill(pid, SIGTERM);
  t.join();
  EXPECT_EQ(second.code, 1) << second.output;
  EXPECT_NE(second.output.find("train.out_dir " + out.string() + " is in use by another run (pid " +
                               std::to_string(pid) + " on "),
            std::string::npos)
      << second.output;
  EXPECT_EQ(second.output.find("step 1/"), std::string::npos) << second.output;
  // The first trained on and stopped with its checkpoint.
  EXPECT_EQ(first.code, 143) << first.output;
  EXPECT_NE(first.output.find("stopped by signal 15 at step "), std::string::npos) << first.output;
  // Once it is gone the directory is free again.
  const auto third = run_process({kWorker, cfg, "--out", out.string(), "--steps", "2", "--no-resume"}, {}, 0, "", 60s);
  EXPECT_EQ(third.code, 0) << third.output;
  fs::remove_all(d);
}

}  // namespace
