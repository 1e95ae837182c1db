// What the run fingerprint knows of a file's content (train/content_identity.h):
// a small file is hashed whole; a large one over its head, every safetensors
// tensor's ends and strided blocks, so a change there is seen and one only
// in the middle of a tensor is not (the documented limit). The entries name
// the files an init_from directory and a shard glob make the run read.
#include "train/content_identity.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "support/run_process.h"
#include "train/safetensors.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using weft::testing::fresh_dir;
using weft::testing::write_file;

void write_bytes(const fs::path& p, size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7 + i / 251) & 0xff);
  std::ofstream(p, std::ios::binary) << s;
}

void poke(const fs::path& p, uint64_t at) {
  std::fstream io(p, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  io.read(&c, 1);
  io.seekp(static_cast<std::streamoff>(at));
  c = static_cast<char>(c ^ 0x5a);
  io.write(&c, 1);
}

// Whether flipping the byte at `at` in a copy of `p` changes its identity.
bool sees(const fs::path& p, uint64_t at, const ContentSampling& s) {
  const fs::path copy = p.parent_path() / ("copy-" + p.filename().string());  // the same suffix
  fs::copy_file(p, copy, fs::copy_options::overwrite_existing);
  EXPECT_EQ(file_identity(copy.string(), s), file_identity(p.string(), s));
  poke(copy, at);
  const bool seen = file_identity(copy.string(), s) != file_identity(p.string(), s);
  fs::remove(copy);
  return seen;
}

TEST(ContentIdentity, ASmallFileIsHashedWhole) {
  const fs::path d = fresh_dir("ident-small");
  write_bytes(d / "f", 100000, 1);
  const std::string id = file_identity((d / "f").string());
  EXPECT_EQ(id.rfind("100000 bytes, content ", 0), 0u) << id;
  for (uint64_t at : {0ull, 4096ull, 54321ull, 99999ull}) EXPECT_TRUE(sees(d / "f", at, {})) << at;
  fs::remove_all(d);
}

TEST(ContentIdentity, ALargeFileIsSampledAtItsHeadStridedBlocksAndEnd) {
  const fs::path d = fresh_dir("ident-large");
  const ContentSampling s{.whole_file_bytes = 4096, .head_bytes = 256, .block_bytes = 64, .strided_blocks = 8};
  const uint64_t size = 100000;
  write_bytes(d / "f", size, 2);
  EXPECT_EQ(file_identity((d / "f").string(), s).rfind("100000 bytes, sampled content ", 0), 0u);
  EXPECT_TRUE(sees(d / "f", 10, s));                            // the head
  EXPECT_TRUE(sees(d / "f", size - 1, s));                      // the last block
  EXPECT_TRUE(sees(d / "f", (size - 64) * 3 / 7 + 5, s));       // a strided block
  EXPECT_FALSE(sees(d / "f", (size - 64) * 3 / 7 + 2000, s));   // between blocks: not read
  write_bytes(d / "g", size, 3);
  EXPECT_NE(file_identity((d / "f").string(), s), file_identity((d / "g").string(), s)) << "other content";
  write_bytes(d / "g", size + 1, 2);
  EXPECT_NE(file_identity((d / "f").string(), s), file_identity((d / "g").string(), s)) << "another size";
  fs::remove_all(d);
}

// A small tensor between two large ones lies in no strided block, but its
// first and last blocks are read; so is the whole header.
TEST(ContentIdentity, EverySafetensorsTensorIsSampledAtBothEnds) {
  const fs::path d = fresh_dir("ident-st");
  std::vector<float> big(20000, 0.5f), small(16, 0.25f);
  SafetensorsWriter w;
  w.add("a", DType::F32, {20000}, big.data());
  w.add("b", DType::F32, {16}, small.data());
  w.add("c", DType::F32, {20000}, big.data());
  const fs::path f = d / "model.safetensors";
  w.write(f.string());
  const SafetensorsIndex idx = SafetensorsIndex::open(f.string());
  const ContentSampling s{.whole_file_bytes = 4096, .head_bytes = 64, .block_bytes = 32, .strided_blocks = 2};
  EXPECT_TRUE(sees(f, 20, s));                                       // the header
  EXPECT_TRUE(sees(f, idx.at("b").offset + 40, s));                  // the small tensor, whole
  EXPECT_TRUE(sees(f, idx.at("a").offset + idx.at("a").bytes - 1, s));  // a's last block
  EXPECT_TRUE(sees(f, idx.at("c").offset + 3, s));                   // c's first block
  EXPECT_FALSE(sees(f, idx.at("a").offset + 40000, s));              // the middle of a tensor
  fs::remove_all(d);
}

TEST(ContentIdentity, AnUnreadableFileIsAValueNotAnError) {
  const fs::path d = fresh_dir("ident-bad");
  EXPECT_EQ(file_identity((d / "missing").string()), "unreadable (No such file or directory)");
  ASSERT_EQ(::mkfifo((d / "fifo").c_str(), 0600), 0);
  EXPECT_EQ(file_identity((d / "fifo").string()).rfind("unreadable (not a regular file", 0), 0u)
      << file_identity((d / "fifo").string());
  fs::remove_all(d);
}

TEST(ContentIdentity, EntriesNameTheFilesAnInitFromAndAGlobRead) {
  const fs::path d = fresh_dir("ident-cfg");
  const fs::path m = d / "model";
  fs::create_directories(m);
  write_file(m / "config.json", "{}");
  write_file(m / "model.safetensors.index.json",
             R"({"weight_map": {"x": "model-00002-of-00002.safetensors", "y": "model-00001-of-00002.safetensors",
                                "z": "model-00002-of-00002.safetensors"}})");
  write_bytes(m / "model-00001-of-00002.safetensors", 100, 1);
  write_bytes(m / "model-00002-of-00002.safetensors", 200, 2);
  write_file(m / "README.md", "not read by weft");
  fs::create_directories(d / "lang=en");
  write_bytes(d / "lang=en" / "train_000.bin", 300, 3);
  WorkerConfig cfg;
  cfg.init_from = m.string();
  cfg.data.source = DataSource::Shards;
  cfg.data.shards = (d / "lang=en" / "*.bin").string();
  const auto e = content_identity(cfg);
  std::vector<std::string> paths;
  for (const auto& [path, value] : e) paths.push_back(path);
  const std::string shard = (d / "lang%3Den" / "train_000.bin").string();
  EXPECT_EQ(paths, (std::vector<std::string>{
                       "init_from files", "init_from file config.json", "init_from file model.safetensors.index.json",
                       "init_from file model-00001-of-00002.safetensors",
                       "init_from file model-00002-of-00002.safetensors", "data.shards files",
                       "data.shards file " + shard}));
  EXPECT_EQ(e[0].second, "config.json, model.safetensors.index.json, model-00001-of-00002.safetensors, "
                         "model-00002-of-00002.safetensors");
  EXPECT_EQ(e[3].second, file_identity((m / "model-00001-of-00002.safetensors").string()));
  EXPECT_EQ(e[5].second, shard);

  // A glob nothing matches, and synthetic data (its glob unread): no files.
  cfg.init_from.clear();
  cfg.data.shards = (d / "none_*.bin").string();
  EXPECT_EQ(content_identity(cfg), (std::vector<std::pair<std::string, std::string>>{{"data.shards files", ""}}));
  cfg.data.source = DataSource::Synthetic;
  EXPECT_TRUE(content_identity(cfg).empty());
  fs::remove_all(d);
}

}  // namespace
}  // namespace weft
