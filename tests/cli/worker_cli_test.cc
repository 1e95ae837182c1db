// weft-worker as a user runs it: exit codes, error messages, signals.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/net.h"
#include "support/run_process.h"

namespace {

namespace fs = std::filesystem;
using weft::testing::free_port;
using weft::testing::fresh_dir;
using weft::testing::run_process;
using weft::testing::write_file;
const std::string kWorker = weft::testing::bin("weft-worker");

nlohmann::json summary(const fs::path& dir) {
  std::ifstream in(dir / "summary.json");
  return nlohmann::json::parse(in);
}

// Metrics off: the default port (9400 on every address) would be taken from
// the local cluster's pods of the e2e tests running beside this one, whose
// ranks then refuse to train.
const char* kSmall = R"(preset: tiny
model: {vocab_size: 32, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, max_seq_len: 16}
train: {seq_len: 16, micro_batch: 4, steps: 3000, log_every: 100}
data: {branching: 3}
metrics: {port: 0}
)";

TEST(WorkerCli, BadConfigExitsOneNamingTheField) {
  fs::path d = fresh_dir("badcfg");
  std::string cfg = write_file(d / "c.yaml", "model:\n  n_heads: 5\n");
  auto r = run_process({kWorker, cfg});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("model.n_heads"), std::string::npos) << r.output;
  auto missing = run_process({kWorker, (d / "nope.yaml").string()});
  EXPECT_EQ(missing.code, 1) << missing.output;
  EXPECT_NE(missing.output.find("nope.yaml"), std::string::npos) << missing.output;
  fs::remove_all(d);
}

// Configs that used to crash, train on the wrong settings, or end in a NaN
// loss retried as an internal error: each is now exit 1 naming the field, in
// --print-config and in training alike, before a step.
TEST(WorkerCli, RefusedByNameNotCrashedOrIgnored) {
  fs::path d = fresh_dir("refused");
  // Said only "invalid YAML: bad file" (yaml-cpp's message for its depth guard).
  const std::string deep = "preset: tiny\nmetrics: {port: 0}\nx: " + std::string(3000, '[') + std::string(3000, ']') + "\n";
  const std::pair<const char*, const char*> cases[] = {
      {deep.c_str(), ":3:"},
      {deep.c_str(), "invalid YAML: nested 500 levels deep, more than the parser follows"},
      // SIGFPE (exit 136) before: head_dim = d_model / n_heads.
      {"preset: tiny\nmodel: {n_heads: 0}\nmetrics: {port: 0}\n", "model.n_heads: must be > 0, got 0"},
      // Trained at lr 0.003 before: the second document was dropped.
      {"preset: tiny\nmetrics: {port: 0}\n---\noptim: {lr: 0.5}\n", ":4: a second YAML document (after '---')"},
      // A NaN loss at step 1-2 and exit 2 (retried) before.
      {"preset: tiny\nmetrics: {port: 0}\noptim: {lr: 1e300}\n", "optim.lr: must be <= 10"},
      {"preset: tiny\nmetrics: {port: 0}\nmodel: {init_std: 4294967297}\n", "model.init_std: must be <= 10"},
      {"preset: tiny\nmetrics: {port: 0}\neval: {every: 0, batches: -1}\n", "eval.batches: must be >= 1, got -1"},
  };
  int i = 0;
  for (const auto& [yaml, want] : cases) {
    const std::string cfg = write_file(d / ("c" + std::to_string(i++) + ".yaml"), yaml);
    for (bool print : {true, false}) {
      std::vector<std::string> args = {kWorker, cfg, "--out", (d / "out").string()};
      if (print) args.push_back("--print-config");
      auto r = run_process(args);
      EXPECT_EQ(r.code, 1) << yaml << r.output;
      EXPECT_NE(r.output.find(want), std::string::npos) << yaml << r.output;
      EXPECT_EQ(r.output.find("step 1"), std::string::npos) << yaml << r.output;
    }
  }
  fs::remove_all(d);
}

// train.attention chooses among GPU kernels: on the CPU a run that set it is
// told once that it has no effect, instead of nothing.
TEST(WorkerCli, AttentionKernelChoiceOnTheCpuIsSaidOnce) {
  fs::path d = fresh_dir("attn-cpu");
  auto r = run_process({kWorker, "--preset", "tiny", "--steps", "2", "--out", (d / "out").string()},
                       {"WEFT_ATTENTION=cudnn", "WEFT_METRICS_PORT=0"});
  EXPECT_EQ(r.code, 0) << r.output;
  const std::string said = "train.attention: cudnn chooses among GPU attention kernels";
  ASSERT_NE(r.output.find(said), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(said), r.output.rfind(said)) << "said more than once:\n" << r.output;
  fs::remove_all(d);
}

// --print-config shows the config the rank runs: every auto the config
// decides made concrete (on this CPU-only config: gloo, f32, no recompute,
// synchronous checkpoints), and WEFT_ATTENTION as train.attention.
TEST(WorkerCli, PrintConfigShowsTheResolvedConfig) {
  auto r = run_process({kWorker, "--preset", "tiny", "--print-config"}, {"WEFT_ATTENTION=simt"});
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* shown : {"device: \"cpu\"", "  backend: \"gloo\"", "  dtype: \"f32\"", "  recompute: \"none\"",
                            "  async: \"false\"", "  attention: \"simt\"", "  source: \"synthetic\""})
    EXPECT_NE(r.output.find(shown), std::string::npos) << shown << "\n" << r.output;
  EXPECT_EQ(r.output.find("\"auto\""), std::string::npos) << "no mode is left auto here\n" << r.output;
  // A cuda config resolves the other way, without touching a GPU.
  auto cuda = run_process({kWorker, "--preset", "tiny", "--print-config"}, {"WEFT_DEVICE=cuda", "CUDA_VISIBLE_DEVICES="});
  ASSERT_EQ(cuda.code, 0) << cuda.output;
  for (const char* shown : {"device: \"cuda\"", "  backend: \"nccl\"", "  dtype: \"bf16\"", "  recompute: \"pointwise\"",
                            "  async: \"true\"", "  attention: \"auto\""})
    EXPECT_NE(cuda.output.find(shown), std::string::npos) << shown << "\n" << cuda.output;
  // A bad WEFT_ATTENTION is bad config (exit 1) naming the variable, the field and the choices.
  auto bad = run_process({kWorker, "--preset", "tiny", "--print-config"}, {"WEFT_ATTENTION=flash"});
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("WEFT_ATTENTION=flash: train.attention: 'flash' is not one of auto, cudnn, simt"),
            std::string::npos)
      << bad.output;
}

// device: cuda where no GPU can be used (CUDA_VISIBLE_DEVICES empty hides
// them on any machine; a build without CUDA has none) is bad input named
// before any rendezvous, not an NCCL failure. Rank 0 then keeps its store up
// a few seconds for the peer to hear why (RankRefusals in refusal_test.cc);
// this peer never comes.
TEST(WorkerCli, CudaWithoutAUsableGpuExitsOneBeforeTheRendezvous) {
  fs::path d = fresh_dir("nogpu");
  std::string cfg = write_file(d / "c.yaml", "preset: tiny\ndevice: cuda\n");
  // A world of 2 whose peer never comes: reaching the rendezvous would wait.
  auto r = run_process({kWorker, cfg, "--out", (d / "out").string()},
                       {"WEFT_DEVICE=cuda", "CUDA_VISIBLE_DEVICES=", "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                        "MASTER_PORT=" + std::to_string(free_port())},
                       0, "", std::chrono::seconds(60));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("device: cuda, but no GPU is usable"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("WEFT_DEVICE=cpu"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rendezvous failed"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("NCCL"), std::string::npos) << r.output;
  fs::remove_all(d);
}

// A rank still waiting for rank 0's store (rendezvous timeout 600 s) stops at
// once on SIGTERM, as kubectl delete pod expects, instead of waiting it out.
TEST(WorkerCli, SigtermDuringTheRendezvousExitsAtOnce) {
  fs::path d = fresh_dir("rdzvterm");
  std::string cfg = write_file(d / "c.yaml", "preset: tiny\n");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_process({kWorker, cfg, "--out", (d / "out").string()},
                       {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(free_port())},
                       SIGTERM, "rendezvous: waiting", std::chrono::seconds(60));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.code, 143) << r.output;
  EXPECT_NE(r.output.find("stopped by a signal while joining the job"), std::string::npos) << r.output;
  EXPECT_LT(secs, 30) << r.output;
  fs::remove_all(d);
}

TEST(WorkerCli, BadShardExitsOneNamingTheFile) {
  fs::path d = fresh_dir("badshard");
  write_file(d / "junk.bin", std::string(2000, 'x'));
  std::string cfg = write_file(d / "c.yaml", std::string("preset: tiny\ndata: {source: shards, shards: '") +
                                            (d / "*.bin").string() + "'}\n");
  auto r = run_process({kWorker, cfg, "--out", (d / "out").string()});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("junk.bin"), std::string::npos) << r.output;
  fs::remove_all(d);
}

// SIGTERM: checkpoint, exit 143; the next start resumes and ends exactly
// where an uninterrupted run ends.
TEST(WorkerCli, SigtermCheckpointsAndResumeMatchesUninterruptedRun) {
  fs::path d = fresh_dir("sigterm");
  std::string cfg = write_file(d / "c.yaml", kSmall);
  auto full = run_process({kWorker, cfg, "--out", (d / "full").string()});
  ASSERT_EQ(full.code, 0) << full.output;
  EXPECT_NE(full.output.find("attention: cpu (weft's CPU kernels)"), std::string::npos) << full.output;
  auto ref = summary(d / "full")["losses"].get<std::vector<double>>();

  // Signal once the run is visibly under way (the first progress line).
  // WEFT_TERMINATION_LOG: the final progress for the operator (a pod's
  // termination message), written at the stop and at the end.
  const std::string term = (d / "termination-log").string();
  auto cut = run_process({kWorker, cfg, "--out", (d / "cut").string()}, {"WEFT_TERMINATION_LOG=" + term}, SIGTERM,
                         "/3000 |");
  ASSERT_EQ(cut.code, 143) << cut.output;
  EXPECT_NE(cut.output.find("checkpoint written"), std::string::npos) << cut.output;
  auto first = summary(d / "cut");
  int64_t stopped_at = first["steps_done"];
  ASSERT_GE(stopped_at, 100) << cut.output;
  ASSERT_LT(stopped_at, 3000) << "finished before the signal arrived:\n" << cut.output;
  auto lines = [&] {
    std::ifstream in(term);
    std::vector<std::string> out;
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  };
  auto progress = [](const std::string& line) {
    EXPECT_EQ(line.rfind("weft-progress ", 0), 0u) << line;
    return nlohmann::json::parse(line.substr(line.find('{')));
  };
  std::vector<std::string> at_stop = lines();
  ASSERT_EQ(at_stop.size(), 2u);
  EXPECT_EQ(progress(at_stop[0])["step"], stopped_at);
  const double last_loss = first["losses"].back().get<double>();  // printed with 6 digits
  EXPECT_NEAR(progress(at_stop[0])["loss"].get<double>(), last_loss, 1e-5 * std::abs(last_loss));
  EXPECT_EQ(at_stop[1].rfind("stopped by signal 15 at step " + std::to_string(stopped_at), 0), 0u) << at_stop[1];

  auto resumed = run_process({kWorker, cfg, "--out", (d / "cut").string()}, {"WEFT_TERMINATION_LOG=" + term});
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  auto second = summary(d / "cut");
  EXPECT_EQ(second["start_step"].get<int64_t>(), stopped_at);
  std::vector<std::string> at_end = lines();
  ASSERT_EQ(at_end.size(), 1u);  // the file is rewritten, not appended to
  const nlohmann::json done = progress(at_end[0]);
  EXPECT_EQ(done["step"], 3000);
  EXPECT_GT(done["tokensPerSecond"].get<double>(), 0);
  auto tail = second["losses"].get<std::vector<double>>();
  ASSERT_EQ(tail.size(), ref.size() - stopped_at);
  for (size_t i = 0; i < tail.size(); ++i) ASSERT_EQ(tail[i], ref[stopped_at + i]) << "step " << stopped_at + i + 1;
  fs::remove_all(d);
}

// A rank with the wrong rendezvous token is a launch mistake: it must fail
// at once with exit 1 (not retryable), not 3.
TEST(WorkerCli, WrongRendezvousTokenExitsOne) {
  fs::path d = fresh_dir("token");
  std::string cfg = write_file(d / "c.yaml", kSmall);
  const std::string port = std::to_string(free_port());
  const std::vector<std::string> common = {"WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                                           "MASTER_PORT=" + port, "WEFT_METRICS_PORT=0"};
  pid_t rank0 = fork();
  if (rank0 == 0) {
    for (const std::string& kv : common) putenv(const_cast<char*>(kv.c_str()));
    putenv(const_cast<char*>("RANK=0"));
    putenv(const_cast<char*>("WEFT_RDZV_TOKEN=right"));
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execl(kWorker.c_str(), kWorker.c_str(), cfg.c_str(), "--out", (d / "r0").c_str(), nullptr);
    _exit(127);
  }
  std::vector<std::string> env = common;
  env.push_back("RANK=1");
  env.push_back("WEFT_RDZV_TOKEN=wrong");
  auto r = run_process({kWorker, cfg, "--out", (d / "r1").string()}, env, 0, "",
                       std::chrono::seconds(60));
  kill(rank0, SIGKILL);
  waitpid(rank0, nullptr, 0);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("WEFT_RDZV_TOKEN"), std::string::npos) << r.output;
  fs::remove_all(d);
}

}  // namespace
