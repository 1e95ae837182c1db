#include "train/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "train/train_util.h"
#include "train/trainer.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing::fresh_dir;
using testing::small_config;

// Stopping at step k and resuming must reproduce the uninterrupted run's
// losses bit for bit: same data order, same optimizer state, same schedule.
TEST(Resume, ResumeFromMidRunCheckpointMatchesUninterruptedRunExactly) {
  fs::path dir = fresh_dir("resume");
  WorkerConfig full = small_config((dir / "full").string());
  full.train.grad_accum = 2;
  TrainSummary ref = Trainer(full).run();
  ASSERT_EQ(ref.losses.size(), 20u);

  WorkerConfig part = full;
  part.train.out_dir = (dir / "part").string();
  part.checkpoint.every = 8;
  TrainSummary a = Trainer(part).run();
  EXPECT_EQ(a.losses, ref.losses) << "checkpointing must not change training";
  testing::expect_exact_resume(part, ref, 8);  // as if it had died after step-8
  fs::remove_all(dir);
}

TEST(Resume, StopFlagWritesCheckpointAndResumes) {
  fs::path dir = fresh_dir("stopflag");
  WorkerConfig c = small_config(dir.string());
  TrainSummary ref = Trainer(c).run();
  fs::remove_all(dir);
  std::atomic<int> stop{15};  // already set: stops before the first step
  TrainSummary s0 = Trainer(c).run(&stop);
  EXPECT_TRUE(s0.stopped_early);
  EXPECT_EQ(s0.steps_done, 0);
  stop = 0;
  TrainSummary s = Trainer(c).run(&stop);
  EXPECT_FALSE(s.stopped_early);
  EXPECT_EQ(s.losses, ref.losses);
  fs::remove_all(dir);
}

// Resuming with another model shape is a config mistake (exit 1 naming the
// fields), not a broken checkpoint to skip or an I/O error.
TEST(Resume, ChangedModelConfigNamesTheFields) {
  fs::path dir = fresh_dir("reshape");
  WorkerConfig c = small_config(dir.string());
  c.train.steps = 2;
  Trainer(c).run();
  WorkerConfig changed = c;
  changed.train.steps = 4;
  changed.model.d_model = c.model.d_model / 2;
  changed.model.n_layers = c.model.n_layers + 1;
  try {
    Trainer(changed).run();
    ADD_FAILURE() << "resumed a checkpoint of another model";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model.d_model: checkpoint " + std::to_string(c.model.d_model) + ", config " +
                     std::to_string(changed.model.d_model)),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("model.n_layers"), std::string::npos) << m;
    EXPECT_EQ(m.find("model.vocab_size"), std::string::npos) << m;
  }
  // The same model resumes.
  WorkerConfig same = c;
  same.train.steps = 3;
  EXPECT_EQ(Trainer(same).run().start_step, 2);
  fs::remove_all(dir);
}

class CorruptCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir("corrupt");
    cfg_ = small_config(dir_.string());
    cfg_.train.steps = 12;
    cfg_.checkpoint.every = 4;
    cfg_.checkpoint.keep = 5;
    Trainer(cfg_).run();
    ckpts_ = list_checkpoints((dir_ / "checkpoints").string());
    ASSERT_EQ(ckpts_.size(), 3u);  // step-12, step-8, step-4
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::optional<CheckpointMeta> load() {
    Llama m(cfg_.model);
    AdamW o(cfg_.optim, default_param_ranges(m.params(), cfg_.optim));
    return load_latest_checkpoint((dir_ / "checkpoints").string(), m, o);
  }

  fs::path dir_;
  WorkerConfig cfg_;
  std::vector<std::string> ckpts_;
};

TEST_F(CorruptCheckpoint, IntactLoadsNewest) {
  auto m = load();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, 12);
}

TEST_F(CorruptCheckpoint, FlippedByteFallsBackToPrevious) {
  fs::path f = fs::path(ckpts_[0]) / "model.safetensors";
  std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(static_cast<std::streamoff>(fs::file_size(f) / 2));
  char c = 0;
  io.read(&c, 1);
  io.seekp(-1, std::ios::cur);
  c ^= 0x5a;
  io.write(&c, 1);
  io.close();
  auto m = load();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, 8);
}

TEST_F(CorruptCheckpoint, TruncatedFileFallsBackToPrevious) {
  fs::path f = fs::path(ckpts_[0]) / "optim-rank-0.safetensors";
  fs::resize_file(f, fs::file_size(f) - 100);
  auto m = load();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, 8);
}

TEST_F(CorruptCheckpoint, MissingMetaFallsBackAndAllBadIsAnError) {
  fs::remove(fs::path(ckpts_[0]) / "meta.json");
  EXPECT_EQ(load()->step, 8);
  std::ofstream(fs::path(ckpts_[1]) / "meta.json") << "{ not json";
  EXPECT_EQ(load()->step, 4);
  fs::remove(fs::path(ckpts_[2]) / "model.safetensors");
  try {
    load();
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("no valid checkpoint"), std::string::npos) << e.what();
  }
}

// meta.json carries a checksum of its own: a hand-edited step (or
// next_step) is refused like a corrupt file, and the run resumes from the
// previous intact checkpoint, saying why.
TEST_F(CorruptCheckpoint, EditedMetaFallsBackToPrevious) {
  const fs::path meta = fs::path(ckpts_[0]) / "meta.json";
  std::ifstream in(meta);
  nlohmann::json j = nlohmann::json::parse(in);
  in.close();
  ASSERT_TRUE(j.contains("meta_crc32"));
  j["step"] = 100;
  j["data"]["next_step"] = 100;
  std::ofstream(meta) << j.dump(2);
  EXPECT_EQ(load()->step, 8);
  // Untouched (re-serialized the same), it loads again.
  j["step"] = 12;
  j["data"]["next_step"] = 12;
  std::ofstream(meta) << j.dump(2);
  EXPECT_EQ(load()->step, 12);
}

// meta.json or `latest` as a FIFO (or a device) would block the rank in its
// open, where a stop signal cannot end it: refused at once, named, and the
// newest intact checkpoint taken.
TEST_F(CorruptCheckpoint, FifoMetaOrLatestIsRefusedNotOpened) {
  const fs::path meta = fs::path(ckpts_[0]) / "meta.json";
  fs::remove(meta);
  ASSERT_EQ(::mkfifo(meta.c_str(), 0600), 0);
  EXPECT_EQ(load()->step, 8);
  const fs::path latest = dir_ / "checkpoints" / "latest";
  fs::remove(latest);
  ASSERT_EQ(::mkfifo(latest.c_str(), 0600), 0);
  EXPECT_EQ(load()->step, 8);
  // export_hf needs `latest` when given the directory: named, not waited on.
  try {
    export_hf((dir_ / "checkpoints").string(), (dir_ / "hf").string());
    ADD_FAILURE() << "exported through a FIFO";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(latest.string() + ": not a regular file (a FIFO)"), std::string::npos)
        << e.what();
  }
}

TEST_F(CorruptCheckpoint, KeepRemovesOldest) {
  cfg_.train.steps = 20;
  cfg_.checkpoint.keep = 2;
  Trainer(cfg_).run();
  auto all = list_checkpoints((dir_ / "checkpoints").string());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_NE(all[0].find("step-20"), std::string::npos);
  EXPECT_NE(all[1].find("step-16"), std::string::npos);
}

TEST(Safetensors, RejectsBadFiles) {
  fs::path dir = fresh_dir("st");
  auto expect_error = [&](const std::string& bytes, const std::string& needle) {
    fs::path p = dir / "x.safetensors";
    std::ofstream(p, std::ios::binary) << bytes;
    try {
      SafetensorsFile::load(p.string());
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("abc", "truncated");
  expect_error(std::string("\xff\x00\x00\x00\x00\x00\x00\x00", 8) + "{}", "truncated");
  std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string len(8, '\0');
  len[0] = static_cast<char>(h.size());
  expect_error(len + h + "1234", "truncated: tensor 'a'");
  std::string h2 = R"({"a":{"dtype":"Q99","shape":[1],"data_offsets":[0,4]}})";
  len[0] = static_cast<char>(h2.size());
  expect_error(len + h2 + "1234", "unsupported dtype");
  std::string h3 = "{oops";
  len[0] = static_cast<char>(h3.size());
  expect_error(len + h3, "not valid JSON");
  // Two tensors over the same bytes, with a gap that makes the byte count
  // add up: each would read the other's values.
  std::string h4 =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
      R"("c":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})";
  h4 += std::string(8 - h4.size() % 8, ' ');
  len[0] = static_cast<char>(h4.size() & 0xff);
  len[1] = static_cast<char>(h4.size() >> 8);
  expect_error(len + h4 + std::string(24, 'x'), "tensors 'a' (bytes 0-8) and 'b' (bytes 4-12) overlap");
  // A FIFO is refused without waiting for a writer; so is a directory.
  const fs::path fifo = dir / "fifo.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(
      {
        try {
          SafetensorsIndex::open(fifo.string());
        } catch (const CheckpointError& e) {
          EXPECT_NE(std::string(e.what()).find(fifo.string() + ": not a regular file (a FIFO)"), std::string::npos)
              << e.what();
          throw;
        }
      },
      CheckpointError);
  EXPECT_THROW(SafetensorsFile::load(dir.string()), CheckpointError);
  fs::remove_all(dir);
}

// A header above 100 MB (the safetensors library's limit) is refused by
// size, naming the file, before anything of it is read or parsed. The file is
// sparse: its 100 MB cost no disk.
TEST(Safetensors, AHeaderAbove100MBIsRefusedNamingTheFile) {
  fs::path dir = fresh_dir("st-bighdr");
  const fs::path f = dir / "big.safetensors";
  const uint64_t hlen = kMaxSafetensorsHeaderBytes + 8;
  {
    std::ofstream out(f, std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((hlen >> (8 * i)) & 0xff));
  }
  fs::resize_file(f, 8 + hlen);
  for (auto open : {+[](const std::string& p) { SafetensorsIndex::open(p); },
                    +[](const std::string& p) { SafetensorsFile::load(p); }}) {
    try {
      open(f.string());
      ADD_FAILURE() << "a " << hlen << "-byte header was accepted";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(f.string() + ": header of 100000008 bytes exceeds the 100000000-byte limit"),
                std::string::npos)
          << e.what();
    }
  }
  fs::remove_all(dir);
}

TEST(Safetensors, RoundTrip) {
  fs::path dir = fresh_dir("st-rt");
  std::vector<float> a = {1.5f, -2.0f, 3.25f};
  std::vector<int32_t> b = {7, 8};
  SafetensorsWriter w;
  w.add("a", DType::F32, {3}, a.data());
  w.add("b.c", DType::I32, {1, 2}, b.data());
  w.set_metadata("k", "v");
  uint32_t crc = w.write((dir / "t.safetensors").string());
  EXPECT_EQ(crc, crc32_of_file((dir / "t.safetensors").string()));
  SafetensorsFile f = SafetensorsFile::load((dir / "t.safetensors").string());
  EXPECT_EQ(f.metadata().at("k"), "v");
  const auto& va = f.get("a", DType::F32, 3);
  EXPECT_EQ(static_cast<const float*>(va.data)[2], 3.25f);
  EXPECT_EQ(f.tensors().at("b.c").shape, (std::vector<int64_t>{1, 2}));
  EXPECT_THROW(f.get("a", DType::I32, 3), CheckpointError);
  EXPECT_THROW(f.get("missing", DType::F32, 1), CheckpointError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace weft
