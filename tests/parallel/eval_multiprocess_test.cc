// Held-out evaluation as users run it (eval.every, through weft-run): it does
// not change training (losses and final weights bit-identical with and
// without it), and each evaluation's loss is what `weft-worker --eval` gives
// for that step's checkpoint on one rank, for one rank, DP on 2 ranks, ZeRO-2
// on 2, ZeRO-1 with bf16 working weights on 2 and ISP sp 2 x wp 2 on 4 (their
// mid-run checkpoints are sharded); the
// final progress for the operator carries it.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/checkpoint_weights.h"
#include "support/run_process.h"
#include "train/safetensors.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::bin;
using testing::final_weights;
using testing::fresh_dir;
using testing::run_process;
using testing::write_file;

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"};

struct Case {
  const char* name;
  int ranks;
  const char* parallel;
  const char* train_extra = "";  // more train fields, e.g. ", dtype: bf16"
};

class HeldOutEval : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { dir_ = fresh_dir(std::string("eval-") + GetParam().name); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  std::string config(const std::string& name, bool eval) {
    return write_file(dir_ / (name + ".yaml"),
                      "preset: tiny\n"
                      "model: {vocab_size: 32, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, max_seq_len: 16}\n"
                      "train: {seq_len: 16, steps: 6, log_every: 1, micro_batch: 2" + std::string(GetParam().train_extra) + "}\n"
                      "data: {branching: 3}\n"
                      "checkpoint: {every: 3, resume: false}\n"
                      "metrics: {port: 0}\n" +
                          std::string(eval ? "eval: {every: 3, batches: 5}\n" : "") +
                          "parallel: " + GetParam().parallel + "\n");
  }

  nlohmann::json train(const std::string& name, bool eval, const std::vector<std::string>& env = kEnv) {
    const std::string cfg = config(name, eval);
    const fs::path out = dir_ / name;
    auto r = GetParam().ranks == 1
                 ? run_process({bin("weft-worker"), cfg, "--out", out.string()}, env)
                 : run_process({bin("weft-run"), "-n", std::to_string(GetParam().ranks), cfg, "--out", out.string()},
                               env);
    EXPECT_EQ(r.code, 0) << r.output;
    std::ifstream f(out / "summary.json");
    return nlohmann::json::parse(f);
  }

  double eval_of(const fs::path& model) {
    auto r = run_process({bin("weft-worker"), config("eval-cli", true), "--eval", model.string()}, kEnv);
    EXPECT_EQ(r.code, 0) << r.output;
    const auto at = r.output.find("eval {");
    if (at == std::string::npos) {
      ADD_FAILURE() << "no eval line in:\n" << r.output;
      return 0;
    }
    std::istringstream line(r.output.substr(at + 5));
    std::string json;
    std::getline(line, json);
    return nlohmann::json::parse(json)["loss"].get<double>();
  }

  fs::path dir_;
};

TEST_P(HeldOutEval, LeavesTrainingAloneAndEqualsTheCheckpointsEval) {
  const auto plain = train("plain", false);
  const fs::path log = dir_ / "termination.log";
  std::vector<std::string> env = kEnv;
  env.push_back("WEFT_TERMINATION_LOG=" + log.string());
  const auto with = train("with", true, env);
  EXPECT_EQ(with["losses"], plain["losses"]) << "evaluation changed the training losses";
  const SafetensorsFile a = final_weights(dir_ / "plain"), b = final_weights(dir_ / "with");
  for (const auto& [name, va] : a.tensors()) {
    const auto& vb = b.get(name, DType::F32, va.bytes / 4);
    EXPECT_EQ(std::memcmp(va.data, vb.data, va.bytes), 0) << name << " differs after evaluating";
  }
  ASSERT_EQ(with["eval"]["steps"], nlohmann::json::array({3, 6}));
  const auto losses = with["eval"]["losses"];
  ASSERT_EQ(losses.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    const double during = losses[k].get<double>();
    const double after = eval_of(dir_ / "with" / "checkpoints" / ("step-" + std::to_string(3 * (k + 1))));
    // Ranks sum their batches' losses in float: the same losses in another order.
    EXPECT_NEAR(during, after, 1e-6 * after) << "step " << 3 * (k + 1);
    std::printf("%s: eval after step %d: %.9f during the run, %.9f by --eval of the checkpoint\n", GetParam().name,
                3 * (k + 1), during, after);
  }
  EXPECT_LT(losses[1].get<double>(), losses[0].get<double>()) << "the model learns: held-out loss falls";
  std::ifstream f(log);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_NE(text.str().find("\"evalLoss\":"), std::string::npos) << text.str();
}

INSTANTIATE_TEST_SUITE_P(Strategies, HeldOutEval,
                         ::testing::Values(Case{"one_rank", 1, "{}"}, Case{"dp2", 2, "{bucket_cap_mb: 0.01}"},
                                           Case{"zero2", 2, "{strategy: zero, zero: {stage: 2}}"},
                                           Case{"zero1_bf16", 2, "{strategy: zero, zero: {stage: 1}}", ", dtype: bf16"},
                                           Case{"isp_sp2_wp2", 4, "{strategy: isp, sp: 2, wp: 2}"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace weft
