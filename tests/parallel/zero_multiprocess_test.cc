// ZeRO as a user runs it: real ranks through weft-run over Gloo (loopback).
// They reach plain DP's parameters; a SIGTERM'd ZeRO run resumes from its
// per-rank optimizer shards with bit-identical losses; a checkpoint resumed
// with another bucket layout, strategy or world size re-shards the optimizer
// state; checkpoints are sharded (no rank writes the full model) and
// `weft-worker --export-hf` makes a model directory of any of them; bad ZeRO
// configs exit 1 naming what is wrong.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "support/checkpoint_weights.h"
#include "support/run_process.h"
#include "train/safetensors.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::bin;
using testing::final_weights;
using testing::max_rel_diff;
using testing::fresh_dir;
using testing::run_process;
using testing::write_file;

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"};

class ZeroProcesses : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fresh_dir("zero-mp"); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // train_extra: more train fields, e.g. ", dtype: bf16".
  std::string config(const std::string& name, const std::string& parallel, int steps,
                     const std::string& extra = "", const std::string& train_extra = "") {
    return write_file(
        dir_ / (name + ".yaml"),
        "preset: tiny\n"
        "model: {vocab_size: 32, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, max_seq_len: 16}\n"
        "train: {seq_len: 16, steps: " + std::to_string(steps) + ", log_every: 1, micro_batch: 2" + train_extra + "}\n"
        "optim: {warmup_steps: 3, grad_clip: 0.05}\n"
        "data: {branching: 3}\n"
        "metrics: {port: 0}\n"
        "parallel: " + parallel + "\n" + extra);
  }

  testing::ProcessResult launch(const std::string& cfg, int ranks, const fs::path& out, int sig = 0,
                                const std::string& when = "") {
    return run_process({bin("weft-run"), "-n", std::to_string(ranks), cfg, "--out", out.string()}, kEnv,
                       sig, when, std::chrono::seconds(300));
  }


  static nlohmann::json summary(const fs::path& out) {
    std::ifstream in(out / "summary.json");
    return nlohmann::json::parse(in);
  }

  fs::path dir_;
};

TEST_F(ZeroProcesses, GlooRanksReachDpParameters) {
  struct Case {
    int ranks;
    const char* zero;
  } cases[] = {{2, "{stage: 1, overlap: interleaved, overlap_param_gather: true}"},
               {2, "{stage: 2, overlap: after_backward}"},
               {3, "{stage: 2, overlap: interleaved, overlap_param_gather: true}"},
               {3, "{stage: 1, overlap: none}"}};
  std::map<int, SafetensorsFile> dp;
  for (int n : {2, 3}) {
    fs::path out = dir_ / ("dp-" + std::to_string(n));
    auto r = launch(config("dp" + std::to_string(n), "{bucket_cap_mb: 0.01}", 10), n, out);
    ASSERT_EQ(r.code, 0) << r.output;
    dp.emplace(n, final_weights(out));
  }
  int i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.ranks) + " ranks, zero " + c.zero);
    fs::path out = dir_ / ("zero-" + std::to_string(i));
    auto r = launch(config("zero" + std::to_string(i++),
                           std::string("{strategy: zero, bucket_cap_mb: 0.01, zero: ") + c.zero + "}", 10),
                    c.ranks, out);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("ZeRO stage"), std::string::npos) << r.output;
    // Every rank wrote its shard next to the full model.
    std::ifstream latest(out / "checkpoints" / "latest");
    std::string name;
    latest >> name;
    for (int rank = 0; rank < c.ranks; ++rank)
      EXPECT_TRUE(fs::exists(out / "checkpoints" / name / ("optim-rank-" + std::to_string(rank) + ".safetensors")));
    const double d = max_rel_diff(dp.at(c.ranks), final_weights(out));
    EXPECT_LT(d, 1e-5);
    std::printf("Gloo %d ranks zero %s: max rel diff vs DP %.2e\n", c.ranks, c.zero, d);
  }
}

// A mid-run checkpoint holds each rank's weights in its own file and no
// model files; exported, it is the model plain DP has after the same steps.
// The run's last checkpoint is a model directory already. Exports refuse to
// overwrite, and a checkpoint with a rank file missing or corrupt is refused
// naming the file, with nothing written.
TEST_F(ZeroProcesses, ShardedCheckpointsExportToTheDpModel) {
  const std::string every3 = "checkpoint: {every: 3}\n";
  const fs::path dp = dir_ / "dp", zero = dir_ / "zero";
  auto r = launch(config("dp", "{bucket_cap_mb: 0.01}", 6, every3), 2, dp);
  ASSERT_EQ(r.code, 0) << r.output;
  r = launch(config("zero", "{strategy: zero, bucket_cap_mb: 0.01, zero: {stage: 2}}", 6, every3), 2, zero);
  ASSERT_EQ(r.code, 0) << r.output;
  const fs::path step3 = zero / "checkpoints" / "step-3";
  EXPECT_FALSE(fs::exists(step3 / "model.safetensors"));
  EXPECT_FALSE(fs::exists(step3 / "config.json"));
  std::ifstream meta_in(step3 / "meta.json");
  EXPECT_EQ(nlohmann::json::parse(meta_in).value("weights", ""), "sharded");
  EXPECT_TRUE(fs::exists(zero / "checkpoints" / "step-6" / "model.safetensors"));

  const fs::path exported = dir_ / "exported";
  r = run_process({bin("weft-worker"), "--export-hf", step3.string(), exported.string()}, kEnv);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(exported / "config.json"));
  const SafetensorsFile want = SafetensorsFile::load((dp / "checkpoints" / "step-3" / "model.safetensors").string());
  const double d = max_rel_diff(want, SafetensorsFile::load((exported / "model.safetensors").string()));
  EXPECT_LT(d, 1e-5);
  std::printf("ZeRO-2 step-3 sharded checkpoint, exported, vs DP's step-3 model: max rel diff %.2e\n", d);

  r = run_process({bin("weft-worker"), "--export-hf", step3.string(), exported.string()}, kEnv);
  EXPECT_EQ(r.code, 4) << r.output;  // checkpoint I/O: OUT cannot be written
  EXPECT_NE(r.output.find("exists and is not an empty directory"), std::string::npos) << r.output;

  const fs::path broken = dir_ / "broken";
  fs::copy(step3, broken, fs::copy_options::recursive);
  {
    std::fstream f(broken / "optim-rank-1.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-8, std::ios::end);
    f.write("garbage!", 8);
  }
  r = run_process({bin("weft-worker"), "--export-hf", broken.string(), (dir_ / "out2").string()}, kEnv);
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("optim-rank-1.safetensors: checksum mismatch"), std::string::npos) << r.output;
  fs::remove(broken / "optim-rank-1.safetensors");
  r = run_process({bin("weft-worker"), "--export-hf", broken.string(), (dir_ / "out2").string()}, kEnv);
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("optim-rank-1.safetensors: missing"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "out2"));
  // --eval of the same damaged checkpoint: checkpoint I/O too, naming the file.
  r = run_process({bin("weft-worker"), config("eval-broken", "{strategy: zero, zero: {stage: 2}}", 6, ""), "--eval",
                   broken.string()},
                  kEnv);
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("optim-rank-1.safetensors: missing"), std::string::npos) << r.output;
}

// SIGTERM to weft-run reaches both ranks: they agree on a step, write their
// shards, publish them and exit 143; the restart resumes there with the
// uninterrupted losses. With checkpoint.async on, the stop's own checkpoint
// is written and published before exit (it used to go to the background
// and die unpublished with the process, and the restart threw it away);
// with a checkpoint every step a background write is in flight whenever the
// stop is agreed: it is published, and the same step is not written twice.
TEST_F(ZeroProcesses, SigtermResumeIsBitIdentical) {
  const std::string parallel =
      "{strategy: zero, bucket_cap_mb: 0.01, zero: {stage: 2, overlap: interleaved, overlap_param_gather: true}}";
  const std::string common =
      "preset: tiny\n"
      "model: {vocab_size: 32, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, max_seq_len: 16}\n"
      "train: {seq_len: 16, steps: 400, log_every: 50, micro_batch: 2}\n"
      "optim: {warmup_steps: 3}\n"
      "data: {branching: 3}\n"
      "metrics: {port: 0}\n"
      "parallel: " + parallel + "\n";
  auto full = launch(write_file(dir_ / "full.yaml", common), 2, dir_ / "full");
  ASSERT_EQ(full.code, 0) << full.output;
  auto ref = summary(dir_ / "full")["losses"].get<std::vector<double>>();

  // every 1000: only the stop writes one; every 1: one is in flight.
  struct Case {
    const char* async;
    int every;
  } cases[] = {{"false", 1000}, {"true", 1000}, {"true", 1}};
  for (const Case& k : cases) {
    const std::string name = std::string("async-") + k.async + "-every-" + std::to_string(k.every);
    SCOPED_TRACE(name);
    const std::string c = write_file(dir_ / (name + ".yaml"), common + "checkpoint: {every: " + std::to_string(k.every) +
                                                                  ", keep: 2, async: " + k.async + "}\n");
    const fs::path out = dir_ / name;
    auto cut = launch(c, 2, out, SIGTERM, "step  50/400");
    ASSERT_EQ(cut.code, 143) << cut.output;
    const int64_t stopped_at = summary(out)["steps_done"];
    ASSERT_GE(stopped_at, 50);
    ASSERT_LT(stopped_at, 400) << "finished before the signal arrived";
    const std::string published = (out / "checkpoints" / ("step-" + std::to_string(stopped_at))).string();
    EXPECT_NE(cut.output.find("checkpoint " + published), std::string::npos)
        << "the stop did not name its checkpoint:\n" << cut.output;
    std::ifstream latest(out / "checkpoints" / "latest");
    std::string name_latest;
    latest >> name_latest;
    EXPECT_EQ(name_latest, "step-" + std::to_string(stopped_at));
    for (const auto& e : fs::directory_iterator(out / "checkpoints"))
      EXPECT_NE(e.path().filename().string().rfind(".tmp", 0), 0u) << "left unpublished: " << e.path();

    auto resumed = launch(c, 2, out);
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    EXPECT_EQ(resumed.output.find("leftovers"), std::string::npos) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
    auto second = summary(out);
    EXPECT_EQ(second["start_step"].get<int64_t>(), stopped_at);
    auto tail = second["losses"].get<std::vector<double>>();
    ASSERT_EQ(tail.size(), ref.size() - stopped_at);
    for (size_t i = 0; i < tail.size(); ++i) ASSERT_EQ(tail[i], ref[stopped_at + i]) << "step " << stopped_at + i + 1;
  }
}

// checkpoint.async: each rank writes its files while the next step runs,
// and the checkpoint is published after that step (its log line follows the
// next step's); resumed from one, the run continues bit-identically.
TEST_F(ZeroProcesses, AsyncCheckpointsPublishAfterTheNextStepAndResumeBitIdentically) {
  const std::string c = config("async", "{strategy: zero, bucket_cap_mb: 0.01, zero: {stage: 2}}", 8,
                               "checkpoint: {every: 2, keep: 5, async: true}\n");
  auto full = launch(c, 2, dir_ / "full");
  ASSERT_EQ(full.code, 0) << full.output;
  std::string log;  // rank 0's lines, in its order
  std::istringstream lines(full.output);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("[rank 0]", 0) == 0) log += line + "\n";
  const size_t published = log.find("checkpoint written: " + (dir_ / "full" / "checkpoints" / "step-2").string());
  ASSERT_NE(published, std::string::npos) << log;
  ASSERT_NE(log.find("step 3/8"), std::string::npos) << log;
  EXPECT_LT(log.find("step 3/8"), published) << "step-2 was published before step 3 ran:\n" << log;
  const auto ref = summary(dir_ / "full")["losses"].get<std::vector<double>>();
  const fs::path cut = dir_ / "cut";
  fs::create_directories(cut / "checkpoints");
  fs::copy(dir_ / "full" / "checkpoints" / "step-4", cut / "checkpoints" / "step-4", fs::copy_options::recursive);
  write_file(cut / "checkpoints" / "latest", "step-4\n");
  auto resumed = launch(c, 2, cut);
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  const auto tail = summary(cut)["losses"].get<std::vector<double>>();
  ASSERT_EQ(tail.size(), 4u);
  for (size_t i = 0; i < tail.size(); ++i) EXPECT_EQ(tail[i], ref[4 + i]) << "step " << 5 + i;
}

// bf16 working weights (train.dtype: bf16): ZeRO's master shards, assembled
// at checkpoint time, equal DP's replicated master, and a ZeRO run resumed
// from its mid-run checkpoint (master weights and moments from the rank
// files) ends where the uninterrupted run ends.
TEST_F(ZeroProcesses, Bf16MasterShardsMatchDpAndResume) {
  const std::string bf16 = ", dtype: bf16";
  const std::string zero = "{strategy: zero, bucket_cap_mb: 0.01, zero: {stage: 2, overlap: interleaved}}";
  auto r = launch(config("dp-bf16", "{bucket_cap_mb: 0.01}", 10, "", bf16), 2, dir_ / "dp");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string every5 = "checkpoint: {every: 5, keep: 5}\n";
  r = launch(config("zero-bf16", zero, 10, every5, bf16), 2, dir_ / "zero");
  ASSERT_EQ(r.code, 0) << r.output;
  const SafetensorsFile dp = final_weights(dir_ / "dp"), z = final_weights(dir_ / "zero");
  EXPECT_EQ(dp.tensors().begin()->second.dtype, DType::F32) << "checkpoints hold the f32 master weights";
  const double d = max_rel_diff(dp, z);
  EXPECT_LT(d, 1e-5);
  std::printf("bf16 ZeRO-2 vs bf16 DP, 2 ranks: max rel diff of the master weights %.2e\n", d);
  // A run directory holding only the step-5 checkpoint resumes to step 10.
  const fs::path cut = dir_ / "cut";
  fs::create_directories(cut / "checkpoints");
  fs::copy(dir_ / "zero" / "checkpoints" / "step-5", cut / "checkpoints" / "step-5", fs::copy_options::recursive);
  write_file(cut / "checkpoints" / "latest", "step-5\n");
  r = launch(config("zero-bf16", zero, 10, every5, bf16), 2, cut);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  const double dr = max_rel_diff(z, final_weights(cut));
  EXPECT_EQ(dr, 0.0) << "a bf16 ZeRO resume must be exact";
}

// Optimizer state re-sharded on resume: a ZeRO-2 checkpoint of 2 ranks at
// step 6 resumed (a) as ZeRO with another bucket layout and (b) as plain DP
// reaches the uninterrupted run's step-12 weights; (c) at world size 3 as
// ZeRO and as DP, both rebuilt from the same 2 shards, they agree.
TEST_F(ZeroProcesses, ResumeReshardsAcrossLayoutsStrategiesAndWorldSizes) {
  const std::string zero2 = "{strategy: zero, bucket_cap_mb: 0.01, zero: {stage: 2, overlap: interleaved}}";
  const std::string every6 = "checkpoint: {every: 6, keep: 5}\n";
  fs::path full = dir_ / "full";
  auto r = launch(config("full", zero2, 12, every6), 2, full);
  ASSERT_EQ(r.code, 0) << r.output;
  const fs::path step6 = full / "checkpoints" / "step-6";
  ASSERT_TRUE(fs::exists(step6 / "optim-rank-1.safetensors"));
  // A run directory holding only the step-6 checkpoint.
  auto from_step6 = [&](const std::string& name) {
    fs::path out = dir_ / name;
    fs::create_directories(out / "checkpoints");
    fs::copy(step6, out / "checkpoints" / "step-6", fs::copy_options::recursive);
    write_file(out / "checkpoints" / "latest", "step-6\n");
    return out;
  };
  struct Case {
    const char* name;
    int ranks;
    std::string parallel;
  } cases[] = {{"layout", 2, "{strategy: zero, bucket_cap_mb: 0.003, zero: {stage: 1, overlap: none}}"},
               {"dp", 2, "{bucket_cap_mb: 0.01}"},
               {"zero3", 3, zero2},
               {"dp3", 3, "{bucket_cap_mb: 0.02}"}};
  std::map<std::string, fs::path> outs;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    fs::path out = from_step6(c.name);
    auto res = launch(config(c.name, c.parallel, 12, every6), c.ranks, out);
    ASSERT_EQ(res.code, 0) << res.output;
    EXPECT_NE(res.output.find("resumed from"), std::string::npos) << res.output;
    EXPECT_NE(res.output.find("re-sharded"), std::string::npos) << res.output;
    EXPECT_EQ(summary(out)["start_step"].get<int64_t>(), 6);
    outs[c.name] = out;
  }
  const SafetensorsFile ref = final_weights(full);
  for (const char* name : {"layout", "dp"}) {
    const double d = max_rel_diff(ref, final_weights(outs[name]));
    EXPECT_LT(d, 1e-5) << name;
    std::printf("re-sharded resume (%s) vs uninterrupted: max rel diff %.2e\n", name, d);
  }
  const double d3 = max_rel_diff(final_weights(outs["dp3"]), final_weights(outs["zero3"]));
  EXPECT_LT(d3, 1e-5);
  std::printf("world size 2 -> 3, ZeRO vs DP from the same shards: max rel diff %.2e\n", d3);
  // Missing shards are an error, never a silently fresh optimizer.
  fs::path fresh = from_step6("fresh");
  fs::remove(fresh / "checkpoints" / "step-6" / "optim-rank-0.safetensors");
  fs::remove(fresh / "checkpoints" / "step-6" / "optim-rank-1.safetensors");
  auto broken = launch(config("fresh", zero2, 12, every6), 2, fresh);
  EXPECT_NE(broken.code, 0) << "resumed without its optimizer files";
}

TEST_F(ZeroProcesses, BadZeroConfigsExitOneNamingTheField) {
  struct Case {
    std::string parallel;
    int ranks;
    std::string field;
  } cases[] = {{"{strategy: zero, zero: {stage: 3}}", 2, "parallel.zero.stage"},
               {"{strategy: zero, zero: {overlap: eager}}", 2, "parallel.zero.overlap"},
               {"{strategy: zero}", 1, "parallel.strategy"}};
  int i = 0;
  for (const Case& c : cases) {
    const std::string cfg = config("bad" + std::to_string(i), c.parallel, 5);
    auto r = c.ranks == 1 ? run_process({bin("weft-worker"), cfg, "--out", (dir_ / ("bad-out" + std::to_string(i))).string()}, kEnv)
                          : launch(cfg, c.ranks, dir_ / ("bad-out" + std::to_string(i)));
    ++i;
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find(c.field), std::string::npos) << c.field << ":\n" << r.output;
  }
}

}  // namespace
}  // namespace weft
