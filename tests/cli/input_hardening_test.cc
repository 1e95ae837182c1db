// Bad input on the user's path, run through the real weft-worker and weft-run:
// a model that cannot fit, non-finite weights, shard paths that are not files
// or change while read, usage errors, and ranks that must not outlive or be
// blamed on their launcher. Each ends with a clear message and a contract
// exit code, never an abort, a hang or a bare signal.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

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

// A model of about a billion parameters: 17 GB of weights, gradients and
// AdamW state in f32.
const char* kHuge = R"(model: {d_model: 2048, n_layers: 24, n_heads: 16, n_kv_heads: 8}
metrics: {port: 0}
)";

// ---- 1. a model that cannot fit is refused -------------------------------

TEST(MemoryCheck, RefusedUnderRlimitAsNamingEstimateLimitAndFields) {
  fs::path d = fresh_dir("rlimit");
  std::string cfg = write_file(d / "c.yaml", kHuge);
  const auto t0 = std::chrono::steady_clock::now();
  // 4 GiB of address space: far below the estimate, enough to start.
  auto r = run_process({"/bin/sh", "-c", "ulimit -v 4194304 && exec " + kWorker + " " + cfg + " --out " +
                                             (d / "out").string()},
                       {}, 0, "", 120s);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "this rank needs about")) << r.output;
  EXPECT_TRUE(has(r.output, "RLIMIT_AS (ulimit -v) 4.00 GiB")) << r.output;
  for (const char* field : {"model.d_model", "model.n_layers", "train.micro_batch", "parallel.strategy"})
    EXPECT_TRUE(has(r.output, field)) << field << "\n" << r.output;
  EXPECT_TRUE(has(r.output, "WEFT_SKIP_MEMORY_CHECK=1")) << r.output;
  EXPECT_FALSE(has(r.output, "bad_alloc")) << r.output;
  EXPECT_LT(seconds_since(t0), 60) << r.output;
  // The tiny preset fits under the same limit and trains.
  auto tiny = run_process({"/bin/sh", "-c", "ulimit -v 4194304 && exec " + kWorker + " --preset tiny --steps 2 --out " +
                                                (d / "tiny").string()},
                          {"WEFT_METRICS_PORT=0"}, 0, "", 300s);
  EXPECT_EQ(tiny.code, 0) << tiny.output;
  fs::remove_all(d);
}

// The cgroup limit (memory.max, injected through WEFT_CGROUP_MEMORY_MAX) is
// shared by the ranks of a host; WEFT_SKIP_MEMORY_CHECK=1 overrides the check.
TEST(MemoryCheck, CgroupLimitIsSharedByLocalRanksAndCanBeSkipped) {
  fs::path d = fresh_dir("cgroup");
  // The tiny preset's estimate, from --print-config.
  auto pc = run_process({kWorker, "--preset", "tiny", "--print-config"});
  ASSERT_EQ(pc.code, 0) << pc.output;
  ASSERT_TRUE(has(pc.output, "# memory estimate per rank: ")) << pc.output;
  // 1.5x the estimate: one rank fits, two ranks on the host do not.
  const std::string line = pc.output.substr(pc.output.find("# memory estimate per rank: ") + 28);
  const double mib = std::stod(line);
  ASSERT_TRUE(line.find("MiB") < line.find('(')) << line;
  const std::string limit = write_file(d / "memory.max", std::to_string(int64_t(mib * 1.5 * 1048576)) + "\n");
  const std::vector<std::string> env{"WEFT_CGROUP_MEMORY_MAX=" + limit, "WEFT_METRICS_PORT=0"};

  auto one = run_process({kWorker, "--preset", "tiny", "--steps", "1", "--out", (d / "one").string()}, env);
  EXPECT_EQ(one.code, 0) << one.output;

  auto env2 = env;
  env2.push_back("LOCAL_WORLD_SIZE=2");
  auto two = run_process({kWorker, "--preset", "tiny", "--steps", "1", "--out", (d / "two").string()}, env2);
  EXPECT_EQ(two.code, 1) << two.output;
  EXPECT_TRUE(has(two.output, "the cgroup's memory limit")) << two.output;
  EXPECT_TRUE(has(two.output, limit)) << two.output;
  EXPECT_TRUE(has(two.output, "/ 2 ranks on this host")) << two.output;
  EXPECT_FALSE(fs::exists(d / "two/summary.json"));

  auto env3 = env2;
  env3.push_back("WEFT_SKIP_MEMORY_CHECK=1");
  auto skipped = run_process({kWorker, "--preset", "tiny", "--steps", "1", "--out", (d / "skip").string()}, env3);
  EXPECT_EQ(skipped.code, 0) << skipped.output;
  fs::remove_all(d);
}

// d_model 65536 (a 4-layer model of 150 G parameters) is refused in seconds,
// before anything of it is allocated.
TEST(MemoryCheck, HugeDModelIsRefusedFastWithoutAllocating) {
  fs::path d = fresh_dir("dmodel");
  std::string cfg = write_file(d / "c.yaml", "model: {d_model: 65536}\nmetrics: {port: 0}\n");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_process({kWorker, cfg, "--out", (d / "out").string()}, {}, 0, "", 120s);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "memory: this rank needs about")) << r.output;
  EXPECT_TRUE(has(r.output, "TiB")) << r.output;
  EXPECT_FALSE(has(r.output, "building the model")) << r.output;
  EXPECT_LT(seconds_since(t0), 30) << r.output;
  fs::remove_all(d);
}

// ---- 2. non-finite weights are found at load -----------------------------

// A copy of the small HF Llama fixture in DIR/hf (the files named), its path.
fs::path copy_hf_fixture(const fs::path& dir, std::initializer_list<const char*> files) {
  const fs::path src = fs::path(WEFT_SOURCE_DIR) / "tests/testdata/hf-llama/gqa-untied";
  const fs::path hf = dir / "hf";
  fs::create_directories(hf);
  for (const char* f : files) fs::copy_file(src / f, hf / f);
  return hf;
}

// Overwrites elements [first, first + count) of the F32 tensor `name` of
// FILE (count -1: to its end) with `value`.
void overwrite_f32(const fs::path& file, const std::string& name, uint64_t first, int64_t count, float value) {
  std::fstream st(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t hlen = 0;
  st.read(reinterpret_cast<char*>(&hlen), 8);
  std::string header(hlen, '\0');
  st.read(header.data(), static_cast<std::streamsize>(hlen));
  const auto e = nlohmann::json::parse(header).at(name);
  ASSERT_EQ(e.at("dtype"), "F32");
  const uint64_t begin = e.at("data_offsets")[0].get<uint64_t>() + 4 * first;
  const uint64_t end = count < 0 ? e.at("data_offsets")[1].get<uint64_t>() : begin + 4 * count;
  st.seekp(static_cast<std::streamoff>(8 + hlen + begin));
  for (uint64_t i = begin; i < end; i += 4) st.write(reinterpret_cast<const char*>(&value), 4);
}

TEST(NonFiniteWeights, InitFromWithANanWeightFailsAtLoadNamingTheTensor) {
  fs::path d = fresh_dir("nanload");
  const fs::path hf = copy_hf_fixture(d, {"config.json", "generation_config.json", "model.safetensors"});
  // One element of one tensor becomes NaN (BF16 and F32 files read through
  // the same check; this one is F32).
  const std::string victim = "model.layers.1.mlp.up_proj.weight";
  overwrite_f32(hf / "model.safetensors", victim, 7, 1, std::nanf(""));

  std::string cfg = write_file(d / "c.yaml", "train: {steps: 3, seq_len: 16, micro_batch: 2}\nmetrics: {port: 0}\n");
  auto r = run_process({kWorker, cfg, "--init-from", hf.string(), "--out", (d / "out").string()});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "tensor '" + victim + "' holds a non-finite weight (nan at element 7)")) << r.output;
  EXPECT_TRUE(has(r.output, (hf / "model.safetensors").string())) << r.output;
  EXPECT_FALSE(has(r.output, "step 1")) << r.output;
  fs::remove_all(d);
}

// Finite weights whose activations overflow (a norm weight of 3e38): the
// loss is NaN at step 1, and the rank exits 5 (diverged), which the operator
// does not retry, where it used to exit 2 (internal error, retried until
// maxRestarts); weft-run exits with its rank's 5.
TEST(NonFiniteWeights, ALossThatTurnsNanExitsFiveDivergedNotInternal) {
  fs::path d = fresh_dir("diverge");
  const fs::path hf = copy_hf_fixture(d, {"config.json", "generation_config.json", "model.safetensors"});
  overwrite_f32(hf / "model.safetensors", "model.norm.weight", 0, -1, 3e38f);  // finite: the load passes it

  std::string cfg = write_file(d / "c.yaml", "train: {steps: 3, seq_len: 16, micro_batch: 2, log_every: 1}\n"
                                             "metrics: {port: 0}\n");
  auto r = run_process({kWorker, cfg, "--init-from", hf.string(), "--out", (d / "out").string()});
  EXPECT_EQ(r.code, 5) << r.output;
  EXPECT_TRUE(has(r.output, "diverged: loss is")) << r.output;
  EXPECT_TRUE(has(r.output, "at step 1; lower optim.lr")) << r.output;
  auto two = run_process({kRun, "-n", "2", "--", cfg, "--init-from", hf.string(), "--out", (d / "out2").string()});
  EXPECT_EQ(two.code, 5) << two.output;
  fs::remove_all(d);
}

// A safetensors header above the safetensors library's 100 MB is refused by
// size, naming the file, without reading it (it used to load a 200 MB header
// in 10 s). The file is sparse.
TEST(HostileFiles, ASafetensorsHeaderAbove100MBIsRefusedUnread) {
  fs::path d = fresh_dir("bighdr");
  const fs::path hf = copy_hf_fixture(d, {"config.json", "generation_config.json"});
  const uint64_t hlen = 200'000'000;
  {
    std::ofstream out(hf / "model.safetensors", std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((hlen >> (8 * i)) & 0xff));
  }
  fs::resize_file(hf / "model.safetensors", 8 + hlen);
  std::string cfg = write_file(d / "c.yaml", "train: {steps: 3, seq_len: 16, micro_batch: 2}\nmetrics: {port: 0}\n");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_process({kWorker, cfg, "--init-from", hf.string(), "--out", (d / "out").string()});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, (hf / "model.safetensors").string() + ": header of 200000000 bytes exceeds the "
                                                                  "100000000-byte limit"))
      << r.output;
  EXPECT_FALSE(has(r.output, "step 1")) << r.output;
  std::cout << "refused in " << seconds_since(t0) << " s\n";
  fs::remove_all(d);
}

// ---- 3. a shard path that is not a regular file ---------------------------

TEST(Shards, AFifoIsRefusedNotOpened) {
  fs::path d = fresh_dir("fifo");
  const fs::path fifo = d / "train_000.bin";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  std::string cfg = write_file(d / "c.yaml", "data: {source: shards, shards: '" + (d / "*.bin").string() +
                                                 "'}\nmetrics: {port: 0}\n");
  auto r = run_process({kWorker, cfg, "--out", (d / "out").string()}, {}, 0, "", 60s);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, fifo.string() + ": not a regular file (a FIFO)")) << r.output;
  fs::remove_all(d);
}

// ---- 7. a shard truncated while the run reads it --------------------------


// Whether some process maps `path` (its /proc/PID/maps names it).
bool mapped_by_some_process(const std::string& path) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream maps(e.path() / "maps");
    std::string line;
    while (std::getline(maps, line))
      if (line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0) return true;
  }
  return false;
}

TEST(Shards, TruncatedWhileReadIsBadDataNamingTheFile) {
  fs::path d = fresh_dir("shrink");
  const fs::path shard = d / "train_000.bin";
  weft::cli_test::write_pattern_shard(shard, 1 << 20, 64);
  std::string cfg = write_file(d / "c.yaml", "model: {vocab_size: 64}\ntrain: {steps: 100000, log_every: 1}\n"
                                             "data: {source: shards, shards: '" +
                                                 (d / "*.bin").string() + "'}\nmetrics: {port: 0}\n");
  // Once the worker has mapped the shard, cut it to a tenth.
  std::atomic<bool> cut{false};
  std::thread cutter([&] {
    const auto t0 = std::chrono::steady_clock::now();
    while (seconds_since(t0) < 120 && !mapped_by_some_process(shard.string())) std::this_thread::sleep_for(50ms);
    std::this_thread::sleep_for(500ms);
    fs::resize_file(shard, 1024 + 2 * (1 << 16));
    cut = true;
  });
  auto r = run_process({kWorker, cfg, "--out", (d / "out").string()}, {}, 0, "", 240s);
  cutter.join();
  ASSERT_TRUE(cut);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, shard.string() + ": shard changed while the run reads it")) << r.output;
  fs::remove_all(d);
}

// The same size, other valid tokens: nothing but the write itself tells.
TEST(Shards, RewrittenInPlaceIsBadDataNamingTheFile) {
  fs::path d = fresh_dir("rewrite");
  const fs::path shard = d / "train_000.bin";
  weft::cli_test::write_pattern_shard(shard, 1 << 20, 64);
  std::string cfg = write_file(d / "c.yaml", "model: {vocab_size: 64}\ntrain: {steps: 100000, log_every: 1}\n"
                                             "data: {source: shards, shards: '" +
                                                 (d / "*.bin").string() + "'}\nmetrics: {port: 0}\n");
  std::atomic<bool> written{false};
  std::thread writer([&] {
    const auto t0 = std::chrono::steady_clock::now();
    while (seconds_since(t0) < 120 && !mapped_by_some_process(shard.string())) std::this_thread::sleep_for(50ms);
    std::this_thread::sleep_for(500ms);
    std::fstream io(shard, std::ios::in | std::ios::out | std::ios::binary);  // no truncation
    io.seekp(1024);
    const std::vector<char> zeros(2 * (1 << 20), 0);  // token 0 everywhere: valid
    io.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    written = static_cast<bool>(io.flush());
  });
  auto r = run_process({kWorker, cfg, "--out", (d / "out").string()}, {}, 0, "", 240s);
  writer.join();
  ASSERT_TRUE(written);
  EXPECT_EQ(fs::file_size(shard), 1024u + 2 * (1 << 20));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, shard.string() + ": shard changed while the run reads it (written after it was mapped"))
      << r.output;
  fs::remove_all(d);
}

// ---- 4. usage errors exit 1 like every other bad input --------------------

TEST(Usage, BadFlagsExitOneWithTheMessageAndHelpExitsZero) {
  auto steps0 = run_process({kWorker, "--steps", "0"});
  EXPECT_EQ(steps0.code, 1) << steps0.output;
  EXPECT_TRUE(has(steps0.output, "--steps")) << steps0.output;
  auto unknown = run_process({kWorker, "--no-such-flag"});
  EXPECT_EQ(unknown.code, 1) << unknown.output;
  EXPECT_TRUE(has(unknown.output, "--no-such-flag")) << unknown.output;
  auto n0 = run_process({kRun, "-n", "0", "--worker", "/bin/true"});
  EXPECT_EQ(n0.code, 1) << n0.output;
  EXPECT_TRUE(has(n0.output, "--nproc")) << n0.output;
  auto no_n = run_process({kRun, "--worker", "/bin/true"});
  EXPECT_EQ(no_n.code, 1) << no_n.output;
  for (const std::string& prog : {kWorker, kRun}) {
    auto help = run_process({prog, "--help"});
    EXPECT_EQ(help.code, 0) << help.output;
    EXPECT_TRUE(has(help.output, "Usage")) << help.output;
  }
}

// ---- 5. weft-run says a config is wrong -----------------------------------

TEST(WeftRunConfig, ABadConfigIsCalledABadConfig) {
  fs::path d = fresh_dir("runbadcfg");
  std::string cfg = write_file(d / "c.yaml", "model:\n  n_heads: 5\n");
  auto r = run_process({kRun, "-n", "1", "--", cfg, "--out", (d / "out").string()}, {}, 0, "", 60s);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "weft-run: bad config: ")) << r.output;
  EXPECT_TRUE(has(r.output, "model.n_heads")) << r.output;
  EXPECT_FALSE(has(r.output, "cannot tell where metrics are served")) << r.output;
  fs::remove_all(d);
}

// A launch environment set by hand or by a broken launcher: exit 1 before
// anything is built, naming the variable (before, LOCAL_WORLD_SIZE=2x read
// as 2 in the memory check and the rank went on; a bad WEFT_ATTEMPT passed
// through weft-run to fail every rank).
TEST(LaunchEnvironment, ABadVariableIsNamedAndExitsOne) {
  fs::path d = fresh_dir("badlaunchenv");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"LOCAL_WORLD_SIZE=2x"}, "LOCAL_WORLD_SIZE: '2x'"},
      {{"LOCAL_RANK=two"}, "LOCAL_RANK: 'two'"},
      {{"WORLD_SIZE=4", "RANK=1", "NODE_RANK=1", "LOCAL_WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=127.0.0.1",
        "MASTER_PORT=29555"},
       "RANK: '1' is not NODE_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK = 1 * 2 + 0 = 2"},
  };
  for (const auto& [env, want] : cases) {
    auto r = run_process({kWorker, "--preset", "tiny", "--steps", "1", "--out", (d / "out").string()}, env, 0, "", 60s);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_TRUE(has(r.output, "weft-worker: bad launch environment: " + want)) << r.output;
    EXPECT_FALSE(fs::exists(d / "out/summary.json"));
  }
  auto r = run_process({kRun, "-n", "1", "--", "--preset", "tiny", "--steps", "1", "--out", (d / "out").string()},
                       {"WEFT_ATTEMPT=first"}, 0, "", 60s);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "weft-run: bad launch environment: WEFT_ATTEMPT: 'first'")) << r.output;
  fs::remove_all(d);
}

// ---- 6. ranks die with their launcher ---------------------------------------

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  pid_t c;
  while (in >> c) out.push_back(c);
  return out;
}

bool gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string all((std::istreambuf_iterator<char>(stat)), {});
  const size_t paren = all.rfind(')');
  return paren == std::string::npos || paren + 2 >= all.size() || all[paren + 2] == 'Z' || all[paren + 2] == 'X';
}

TEST(WeftRunLauncher, RanksDieWhenWeftRunIsKilled) {
  fs::path d = fresh_dir("orphans");
  const fs::path log = d / "run.log";
  pid_t run = fork();
  if (run == 0) {
    FILE* f = std::fopen(log.c_str(), "w");
    dup2(fileno(f), 1);
    dup2(fileno(f), 2);
    setenv("WEFT_METRICS_PORT", "0", 1);
    const std::string out = (d / "out").string();
    execl(kRun.c_str(), kRun.c_str(), "-n", "2", "--", "--preset", "tiny", "--steps", "100000", "--out", out.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  // Both ranks are training once each has printed a step line.
  const auto t0 = std::chrono::steady_clock::now();
  auto text = [&] {
    std::ifstream in(log);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  while (seconds_since(t0) < 240 && !(has(text(), "[rank 0] ") && has(text(), "/100000 |")))
    std::this_thread::sleep_for(100ms);
  std::vector<pid_t> ranks = children_of(run);
  ASSERT_EQ(ranks.size(), 2u) << text();
  ASSERT_EQ(::kill(run, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(run, &status, 0), run);
  const auto t1 = std::chrono::steady_clock::now();
  while (seconds_since(t1) < 20 && !(gone(ranks[0]) && gone(ranks[1]))) std::this_thread::sleep_for(50ms);
  for (pid_t p : ranks) {
    EXPECT_TRUE(gone(p)) << "rank pid " << p << " outlived weft-run";
    if (!gone(p)) ::kill(p, SIGKILL);
  }
  fs::remove_all(d);
}

// ---- 9. a rank weft-run killed after --grace is not the cause -------------

TEST(WeftRunLauncher, ARankKilledAfterTheGraceIsReportedHungAndThePeerLossKept) {
  fs::path d = fresh_dir("hung");
  // Rank 0 loses its peer (exit 3); rank 1 hangs, deaf to SIGTERM.
  const std::string worker = write_file(d / "worker.sh",
                                        "#!/bin/sh\n"
                                        "if [ \"$RANK\" = 0 ]; then sleep 1; echo 'peer lost'; exit 3; fi\n"
                                        "trap '' TERM\n"
                                        "echo hanging\n"
                                        "exec sleep 120\n");
  fs::permissions(worker, fs::perms::owner_all);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_process({kRun, "-n", "2", "--grace", "1", "--worker", worker}, {}, 0, "", 90s);
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_TRUE(has(r.output, "rank 0 exited with code 3")) << r.output;
  EXPECT_TRUE(has(r.output, "rank 1 did not stop within 1 s of SIGTERM (hung?); weft-run killed it")) << r.output;
  EXPECT_FALSE(has(r.output, "exited with code 137 (the cause)")) << r.output;
  EXPECT_LT(seconds_since(t0), 60) << r.output;
  fs::remove_all(d);
}

// ---- 8. SIGTERM while the model is being built ----------------------------

TEST(StartupSignals, SigtermWhileBuildingTheModelExitsAtOnce) {
  fs::path d = fresh_dir("buildterm");
  // gpt2-124m takes seconds to build and minutes to step on a small machine:
  // a stop honoured only at the first step would write a checkpoint first.
  auto r = run_process({kWorker, "--preset", "gpt2-124m", "--steps", "5", "--out", (d / "out").string()},
                       {"WEFT_METRICS_PORT=0", "WEFT_DEVICE=cpu"}, SIGTERM, "building the model", 300s);
  EXPECT_EQ(r.code, 143) << r.output;
  EXPECT_TRUE(has(r.output, "stopped by a signal while joining the job, building the model or loading its weights; nothing to save"))
      << r.output;
  EXPECT_FALSE(has(r.output, "checkpoint written")) << r.output;
  EXPECT_FALSE(has(r.output, "step 1/")) << r.output;
  fs::remove_all(d);
}

// A SIGTERM that comes before main has its handlers (in the first
// milliseconds, while the loader runs) took the default action: killed by
// the signal, with no word. Sent here before the worker even starts, and held
// pending by a blocked mask the worker inherits (as a launcher that blocks
// signals for itself may pass on), it is answered the moment main installs
// its handlers: exit 143 by the contract, saying so.
TEST(StartupSignals, ASigtermBeforeMainHasItsHandlersIsAnsweredByTheContract) {
  fs::path d = fresh_dir("earlyterm");
  const std::string log = (d / "out.log").string();
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(::sigprocmask(SIG_BLOCK, &term, &old), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::setenv("WEFT_METRICS_PORT", "0", 1);
    const std::string out = (d / "out").string();
    ::execl(kWorker.c_str(), kWorker.c_str(), "--preset", "tiny", "--steps", "100000", "--out", out.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
  ASSERT_GT(pid, 0);
  ::kill(pid, SIGTERM);  // pending in the child until it unblocks SIGTERM
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 600 && done == 0; ++i) {
    done = ::waitpid(pid, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(100ms);
  }
  if (done == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  std::ifstream in(log);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_NE(done, 0) << "the worker never answered the pending SIGTERM:\n" << output;
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << ":\n" << output;
  EXPECT_EQ(WEXITSTATUS(status), 143) << output;
  EXPECT_TRUE(has(output, "stopped by a signal while joining the job")) << output;
  EXPECT_FALSE(has(output, "step 1/")) << output;
  fs::remove_all(d);
}

}  // namespace
