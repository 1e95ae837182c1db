// What a run trusts to be what it was, probed through the real weft-worker:
// a data shard rewritten in place with its old modification time put back
// (only its change time and content tell), and a checkpoint's meta.json
// edited with its own checksum deleted. Each is refused naming the file; a
// shard whose attributes alone change (chmod, a new hard link) trains on.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "data/shard_writer.h"
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

// Whether some process maps `path` (its /proc/PID/maps names it).
bool mapped_by_some_process(const std::string& path) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream maps(e.path() / "maps");
    std::string line;
    while (std::getline(maps, line))
      if (line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0) return true;
  }
  return false;
}

std::vector<uint16_t> tokens(int64_t count, int vocab) {
  std::vector<uint16_t> t(count);
  for (int64_t i = 0; i < count; ++i) t[i] = static_cast<uint16_t>((i * 7 + i / 3) % vocab);
  return t;
}

// While the run reads the shard: first a chmod and a hard link (attributes
// only: the run must go on), then other valid tokens written over the
// tokens with the old modification time put back, as `touch -r` or a
// careful copy tool would. Before the fix only size and mtime were compared
// and the run trained on the new bytes without a word.
TEST(ShardIdentity, RewrittenWithItsOldMtimeIsBadDataButAChmodIsNot) {
  const fs::path d = fresh_dir("mtime-back");
  const fs::path shard = d / "train_000.bin";
  weft::write_shard(shard.string(), tokens(1 << 20, 64));
  const std::string cfg = write_file(d / "c.yaml", "model: {vocab_size: 64}\ntrain: {steps: 100000, log_every: 1}\n"
                                                   "data: {source: shards, shards: '" +
                                                       (d / "*.bin").string() + "'}\nmetrics: {port: 0}\n");
  std::atomic<bool> rewritten{false};
  std::chrono::steady_clock::time_point rewritten_at{};
  std::thread writer([&] {
    const auto t0 = std::chrono::steady_clock::now();
    while (seconds_since(t0) < 120 && !mapped_by_some_process(shard.string())) std::this_thread::sleep_for(50ms);
    std::this_thread::sleep_for(500ms);
    ::chmod(shard.c_str(), 0444);
    fs::create_hard_link(shard, d / "link.bin.keep");
    std::this_thread::sleep_for(1500ms);  // many batches read with the new change time
    struct stat before {};
    ::stat(shard.c_str(), &before);
    {
      std::fstream io(shard, std::ios::in | std::ios::out | std::ios::binary);  // no truncation
      io.seekp(1024);
      const std::vector<char> zeros(2 * (1 << 20), 0);  // token 0 everywhere: valid
      io.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
      if (!io.flush()) return;
    }
    const struct timespec times[2] = {before.st_atim, before.st_mtim};
    if (::utimensat(AT_FDCWD, shard.c_str(), times, 0) != 0) return;
    rewritten_at = std::chrono::steady_clock::now();
    rewritten = true;
  });
  auto r = run_process({kWorker, cfg, "--out", (d / "out").string()}, {}, 0, "", 120s);
  const auto ended = std::chrono::steady_clock::now();
  writer.join();
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(fs::file_size(shard), 1024u + 2 * (1 << 20));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_GE(ended, rewritten_at) << "stopped by the chmod or the hard link:\n" << r.output;
  EXPECT_TRUE(has(r.output, shard.string() + ": shard changed while the run reads it (rewritten after it was mapped, "
                                              "at the same size and with its old modification time put back"))
      << r.output;
  ::chmod(shard.c_str(), 0644);
  fs::remove_all(d);
}

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
