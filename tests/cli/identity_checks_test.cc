// What a run trusts to be what it was, probed through the real weft-worker:
// a checkpoint's meta.json edited with its own checksum deleted, or moved
// to another step's directory, is refused naming the file.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/run_process.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using weft::testing::fresh_dir;
using weft::testing::has;
using weft::testing::run_process;
using weft::testing::write_file;
const std::string kWorker = weft::testing::bin("weft-worker");

const char* kSmall =
    "model: {vocab_size: 32, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, max_seq_len: 16}\n"
    "train: {seq_len: 16, micro_batch: 2, log_every: 1}\n"
    "data: {branching: 3}\n"
    "metrics: {port: 0}\n"
    "checkpoint: {every: 2, keep: 5}\n";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// step-4's meta.json with meta_crc32 deleted and step set to 3: it used to
// pass (the checksum was optional) and the run "resumed from step-3" with
// step 4's weights. Now it is refused naming the file, and the run resumes
// from step-2, the newest intact one. A checkpoint directory renamed to
// another step (its meta.json intact) is refused the same way.
TEST(CheckpointIdentity, AMetaWithoutItsChecksumOrWithAnotherStepIsRefusedNamingTheFile) {
  const fs::path d = fresh_dir("meta-crc");
  const std::string cfg = write_file(d / "c.yaml", kSmall);
  const fs::path out = d / "out";
  auto first = run_process({kWorker, cfg, "--out", out.string(), "--steps", "4"}, {}, 0, "", 120s);
  ASSERT_EQ(first.code, 0) << first.output;
  fs::copy(out, d / "pristine", fs::copy_options::recursive);
  const fs::path meta = out / "checkpoints" / "step-4" / "meta.json";
  nlohmann::json j = read_json(meta);
  ASSERT_TRUE(j.contains("meta_crc32"));
  j.erase("meta_crc32");
  j["step"] = 3;
  j["data"]["next_step"] = 3;
  std::ofstream(meta) << j.dump(2);

  // Exporting it names the file and writes nothing.
  auto exported = run_process({kWorker, cfg, "--export-hf", (out / "checkpoints" / "step-4").string(),
                               (d / "hf").string()},
                              {}, 0, "", 120s);
  EXPECT_NE(exported.code, 0) << exported.output;
  EXPECT_TRUE(has(exported.output, meta.string() + ": no meta_crc32")) << exported.output;

  auto again = run_process({kWorker, cfg, "--out", out.string(), "--steps", "6"}, {}, 0, "", 120s);
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_TRUE(has(again.output, meta.string() + ": no meta_crc32")) << again.output;
  EXPECT_TRUE(has(again.output, "resumed from " + (out / "checkpoints").string() + "/step-2")) << again.output;
  EXPECT_FALSE(has(again.output, "step-3")) << again.output;
  EXPECT_TRUE(has(again.output, "step 3/6")) << again.output;

  // step-4 renamed step-8, its meta.json untouched (checksum and all).
  const fs::path ckpts = d / "pristine" / "checkpoints";
  fs::rename(ckpts / "step-4", ckpts / "step-8");
  auto renamed = run_process({kWorker, cfg, "--out", (d / "pristine").string(), "--steps", "10"}, {}, 0, "", 120s);
  EXPECT_EQ(renamed.code, 0) << renamed.output;
  EXPECT_TRUE(has(renamed.output, (ckpts / "step-8" / "meta.json").string() + ": step 4, but the directory is step-8"))
      << renamed.output;
  EXPECT_TRUE(has(renamed.output, "resumed from " + ckpts.string() + "/step-2")) << renamed.output;
  fs::remove_all(d);
}

}  // namespace
