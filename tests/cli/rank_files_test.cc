// Ranks that read different bytes under the same name refuse to train
// together, probed through the real weft-worker with two ranks started by
// hand, each in its own working directory (as two pods, or two nodes with
// their own copies): a relative init_from whose weights differ, and a
// relative data.shards whose tokens differ, make every rank exit 1 naming
// the file and the ranks. Before the fix the fingerprint compared only the
// spelling: ISP ranks trained a model mixed from two checkpoints, and DP
// ranks trained on two datasets. The same bytes in two places still train.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "cli/cli_util.h"
#include "support/net.h"
#include "support/run_process.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using weft::testing::fresh_dir;
using weft::testing::has;
using weft::testing::ProcessResult;
using weft::testing::run_process;
using weft::testing::write_file;
const std::string kWorker = weft::testing::bin("weft-worker");
const fs::path kGqa = fs::path(WEFT_SOURCE_DIR) / "tests/testdata/hf-llama/gqa-untied";

// Rank r runs `weft-worker c.yaml` in dirs[r] (its own c.yaml, model/ and
// data/), with its own output directory there.
std::vector<ProcessResult> run_ranks_in(const std::vector<fs::path>& dirs) {
  const std::string port = std::to_string(weft::testing::free_port());
  const int world = static_cast<int>(dirs.size());
  std::vector<ProcessResult> out(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      // sh changes directory and execs the worker: run_process has no cwd.
      out[r] = run_process({"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", dirs[r].string(), kWorker, "c.yaml"},
                           {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(world),
                            "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port},
                           0, "", 180s);
    });
  for (auto& t : ranks) t.join();
  return out;
}

// Overwrites 4 bytes of the data of the first tensor whose data starts
// `from_end` bytes or more before the file's end: other weights, same size.
void overwrite_weights(const fs::path& file, uint64_t at_from_end) {
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(io);
  io.seekp(static_cast<std::streamoff>(fs::file_size(file) - at_from_end));
  const float v = 0.125f;
  io.write(reinterpret_cast<const char*>(&v), sizeof v);
  ASSERT_TRUE(io.flush());
}

// ISP with wp 2 from a relative model directory; `data` is the data section.
std::string isp_from_model(const std::string& data = "{branching: 3}") {
  return "init_from: model\n"
         "train: {steps: 2, seq_len: 16, micro_batch: 2, log_every: 1}\n"
         "data: " + data + "\n"
         "parallel: {strategy: isp, wp: 2}\n"
         "metrics: {port: 0}\n";
}

// Two directories, each with c.yaml and a copy of the HF fixture as model/.
std::vector<fs::path> two_copies(const fs::path& d, const std::string& yaml) {
  std::vector<fs::path> dirs{d / "node0", d / "node1"};
  for (const fs::path& n : dirs) {
    fs::create_directories(n);
    fs::copy(kGqa, n / "model");
    write_file(n / "c.yaml", yaml);
  }
  return dirs;
}

TEST(RankFiles, InitFromWithOtherWeightsUnderOneRelativePathIsRefusedOnEveryRank) {
  const fs::path d = fresh_dir("rank-init-from");
  const auto dirs = two_copies(d, isp_from_model());
  // One weight near the end of the file (the last tensor's data), the
  // edit a later fine-tuning step makes everywhere.
  overwrite_weights(dirs[1] / "model" / "model.safetensors", 64);
  const auto r = run_ranks_in(dirs);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(r[rank].code, 1) << "rank " << rank << ":\n" << r[rank].output;
    EXPECT_TRUE(has(r[rank].output, "weft-worker: bad config: the ranks were started with different settings: "
                                    "init_from file model.safetensors is 478560 bytes, content "))
        << r[rank].output;
    EXPECT_TRUE(has(r[rank].output, "on rank 1 (the same name reads different files")) << r[rank].output;
    EXPECT_TRUE(has(r[rank].output, "(rank 1 of 2 differs from rank 0)")) << r[rank].output;
    EXPECT_FALSE(has(r[rank].output, "step 1/")) << r[rank].output;
  }
  fs::remove_all(d);
}

TEST(RankFiles, ShardsWithOtherTokensUnderOneRelativeGlobAreRefusedOnEveryRank) {
  const fs::path d = fresh_dir("rank-shards");
  const std::string yaml =
      "model: {vocab_size: 32, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, max_seq_len: 16}\n"
      "train: {steps: 2, seq_len: 16, micro_batch: 2, log_every: 1}\n"
      "data: {source: shards, shards: 'data/train_*.bin'}\n"
      "metrics: {port: 0}\n";
  std::vector<fs::path> dirs{d / "node0", d / "node1"};
  for (int r = 0; r < 2; ++r) {
    fs::create_directories(dirs[r] / "data");
    write_file(dirs[r] / "c.yaml", yaml);
    weft::cli_test::write_pattern_shard(dirs[r] / "data" / "train_000.bin", 4096, 32);
    // Same name, same size, other tokens: another dataset.
    weft::cli_test::write_pattern_shard(dirs[r] / "data" / "train_001.bin", 4096, r == 0 ? 32 : 31);
  }
  const auto r = run_ranks_in(dirs);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(r[rank].code, 1) << "rank " << rank << ":\n" << r[rank].output;
    EXPECT_TRUE(has(r[rank].output, "the ranks were started with different settings: data.shards file "
                                    "data/train_001.bin is 9216 bytes, content "))
        << r[rank].output;
    EXPECT_TRUE(has(r[rank].output, "(rank 1 of 2 differs from rank 0)")) << r[rank].output;
  }

  // A shard only one rank has: the list of files differs.
  fs::remove(dirs[1] / "data" / "train_001.bin");
  const auto fewer = run_ranks_in(dirs);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(fewer[rank].code, 1) << fewer[rank].output;
    EXPECT_TRUE(has(fewer[rank].output, "data.shards files is data/train_000.bin, data/train_001.bin on rank 0 but "
                                        "data/train_000.bin on rank 1"))
        << fewer[rank].output;
  }
  fs::remove_all(d);
}

// The same bytes under the same relative names from two directories train.
TEST(RankFiles, IdenticalCopiesInTwoDirectoriesTrain) {
  const fs::path d = fresh_dir("rank-same");
  // The fixture's vocabulary is 256.
  // ISP ranks write their checkpoint shards into one directory.
  const auto dirs = two_copies(d, isp_from_model("{source: shards, shards: 'data/*.bin'}") + "checkpoint: {dir: '" +
                                      (d / "checkpoints").string() + "'}\n");
  for (const fs::path& n : dirs) {
    fs::create_directories(n / "data");
    weft::cli_test::write_pattern_shard(n / "data" / "train_000.bin", 4096, 200);
  }
  const auto r = run_ranks_in(dirs);
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(r[rank].code, 0) << "rank " << rank << ":\n" << r[rank].output;
  EXPECT_TRUE(has(r[0].output, "settings: all 2 ranks share run fingerprint")) << r[0].output;
  EXPECT_TRUE(has(r[0].output, "initialized 119104 parameters from model")) << r[0].output;
  EXPECT_TRUE(has(r[0].output, "step 2/2")) << r[0].output;
  fs::remove_all(d);
}

}  // namespace
