// llm.c shard reader and writer: round trip, sampling, validation errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "data/data_test_util.h"
#include "data/shard_writer.h"
#include "data/source.h"

namespace weft {
namespace {

using testing_util::data_error_of;
using testing_util::TempDir;

// Tokens first, first+1, ... (mod 65536): a row's position is readable from
// its values.
std::vector<int32_t> ramp(int n, int first = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (first + i) % 65536;
  return t;
}

void patch_int32(const std::string& path, int index, int32_t value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(index * 4);
  f.write(reinterpret_cast<const char*>(&value), 4);
}

testing::AssertionResult fails_with(const std::function<void()>& fn, const std::string& expected) {
  std::string msg = data_error_of(fn);
  if (msg.find(expected) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "message:  " << msg << "\nexpected: " << expected;
}

TEST(ShardSource, RoundTripRowsAreWindowsOfTheShard) {
  TempDir dir;
  const int n = 5000;
  write_shard(dir.file("a.bin"), ramp(n, 100));
  EXPECT_EQ(std::filesystem::file_size(dir.file("a.bin")), 1024u + 2u * n);
  auto source = make_shard_source(dir.file("*.bin"), 3);
  EXPECT_EQ(source->vocab_size(), 100 + n);  // max id 5099, detected from the data
  EXPECT_LT(source->entropy_floor(), 0);
  Batch batch;
  const int B = 32, T = 64;
  std::vector<bool> seen_start(n, false);
  for (int step = 0; step < 10; ++step) {
    source->fill(batch, B, T, BatchIndex{step, 0, 1, 0, 1});
    ASSERT_EQ(batch.B, B);
    ASSERT_EQ(batch.inputs.size(), size_t(B * T));
    for (int b = 0; b < B; ++b) {
      const int32_t start = batch.inputs[b * T];
      ASSERT_GE(start, 100);
      ASSERT_LE(start, 100 + n - 1 - T) << "the target of the last position must exist";
      for (int t = 0; t < T; ++t) {
        ASSERT_EQ(batch.inputs[b * T + t], start + t);
        ASSERT_EQ(batch.targets[b * T + t], start + t + 1);
      }
      seen_start[start - 100] = true;
    }
  }
  EXPECT_GT(std::count(seen_start.begin(), seen_start.end(), true), 250) << "offsets should vary";
}

TEST(ShardSource, ShardsAreWeightedByTheirWindows) {
  TempDir dir;
  write_shard(dir.file("a.bin"), ramp(1000, 0));     // 990 windows of 11
  write_shard(dir.file("b.bin"), ramp(3000, 1000));  // 2990 windows
  auto source = make_shard_source(dir.file("*.bin"), 11);
  EXPECT_EQ(source->vocab_size(), 4000);
  Batch batch;
  const int B = 500, T = 10, steps = 8;
  int from_a = 0;
  for (int step = 0; step < steps; ++step) {
    source->fill(batch, B, T, BatchIndex{step, 0, 1, 0, 1});
    for (int b = 0; b < B; ++b) {
      const int32_t start = batch.inputs[b * T];
      const bool in_a = start < 1000;
      from_a += in_a;
      // No row crosses from one file into the next.
      ASSERT_EQ(batch.targets[b * T + T - 1] < 1000, in_a) << "row starting at " << start;
    }
  }
  const double n = B * steps, p = 990.0 / 3980.0;
  EXPECT_NEAR(from_a / n, p, 6 * std::sqrt(p * (1 - p) / n));
}

TEST(ShardSource, DeterministicAndRanksPartitionTheGlobalBatch) {
  TempDir dir;
  write_shard(dir.file("s0.bin"), ramp(700, 0));
  write_shard(dir.file("s1.bin"), ramp(900, 700));
  auto a = make_shard_source(dir.file("s?.bin"), 5);
  auto b = make_shard_source(dir.file("s?.bin"), 5);
  auto c = make_shard_source(dir.file("s?.bin"), 6);
  Batch x, y, z;
  a->fill(x, 16, 8, BatchIndex{4, 0, 1, 1, 2});
  b->fill(y, 16, 8, BatchIndex{4, 0, 1, 1, 2});
  c->fill(z, 16, 8, BatchIndex{4, 0, 1, 1, 2});
  EXPECT_EQ(x.inputs, y.inputs);
  EXPECT_NE(x.inputs, z.inputs);
  testing_util::expect_rank_partition(*a, 8);
}

TEST(ShardSource, DescribeNamesGlobAndSize) {
  TempDir dir;
  write_shard(dir.file("a.bin"), ramp(300));
  auto source = make_shard_source(dir.file("*.bin"), 1);
  EXPECT_EQ(source->describe(),
            "llm.c shards '" + dir.file("*.bin") + "' (1 files, 300 tokens, max token id 299, seed=1)");
}

TEST(ShardSource, BadMagic) {
  TempDir dir;
  write_shard(dir.file("x.bin"), ramp(100));
  patch_int32(dir.file("x.bin"), 0, 12345);
  EXPECT_TRUE(fails_with([&] { make_shard_source(dir.file("x.bin"), 0); },
                         dir.file("x.bin") +
                             ": not an llm.c token shard (magic 12345, expected 20240520)"));
}

TEST(ShardSource, BadVersion) {
  TempDir dir;
  write_shard(dir.file("x.bin"), ramp(100));
  patch_int32(dir.file("x.bin"), 1, 2);
  EXPECT_TRUE(fails_with([&] { make_shard_source(dir.file("x.bin"), 0); },
                         dir.file("x.bin") + ": unsupported llm.c shard version 2 (expected 1"));
}

TEST(ShardSource, TruncatedAndTrailingData) {
  TempDir dir;
  write_shard(dir.file("x.bin"), ramp(100));
  std::filesystem::resize_file(dir.file("x.bin"), 1024 + 190);
  EXPECT_TRUE(fails_with([&] { make_shard_source(dir.file("x.bin"), 0); },
                         dir.file("x.bin") +
                             ": truncated: header says 100 tokens (1224 bytes) but file has 1214 bytes"));
  std::filesystem::resize_file(dir.file("x.bin"), 1024 + 202);
  EXPECT_TRUE(fails_with([&] { make_shard_source(dir.file("x.bin"), 0); },
                         "header says 100 tokens (1224 bytes) but file has 1226 bytes (trailing data)"));
  std::filesystem::resize_file(dir.file("x.bin"), 10);
  EXPECT_TRUE(fails_with([&] { make_shard_source(dir.file("x.bin"), 0); },
                         dir.file("x.bin") + ": not an llm.c token shard (10 bytes, shorter than"));
}

TEST(ShardSource, OneBadFileAmongGoodOnesIsNamed) {
  TempDir dir;
  write_shard(dir.file("a.bin"), ramp(100));
  write_shard(dir.file("b.bin"), ramp(100));
  write_shard(dir.file("c.bin"), ramp(100));
  patch_int32(dir.file("b.bin"), 2, 99);
  EXPECT_TRUE(fails_with([&] { make_shard_source(dir.file("*.bin"), 0); },
                         dir.file("b.bin") + ": header says 99 tokens"));
}

TEST(ShardSource, EmptyGlobAndEmptyShard) {
  TempDir dir;
  EXPECT_TRUE(fails_with([&] { make_shard_source(dir.file("*.bin"), 0); },
                         "data.shards: no file matches '" + dir.file("*.bin") + "'"));
  write_shard(dir.file("e.bin"), std::vector<int32_t>{});
  EXPECT_TRUE(fails_with([&] { make_shard_source(dir.file("e.bin"), 0); },
                         dir.file("e.bin") + ": empty shard (0 tokens)"));
}

TEST(ShardSource, ShardTooShortForARowIsNamedAtFill) {
  TempDir dir;
  write_shard(dir.file("a.bin"), ramp(1000));
  write_shard(dir.file("b.bin"), ramp(10));
  auto source = make_shard_source(dir.file("*.bin"), 0);
  Batch batch;
  EXPECT_NO_THROW(source->fill(batch, 2, 9, BatchIndex{}));  // 10 tokens = one row of 9 + 1
  EXPECT_TRUE(fails_with([&] { source->fill(batch, 2, 10, BatchIndex{}); },
                         dir.file("b.bin") +
                             ": 10 tokens, too short for a row of seq_len + 1 = 11 tokens"));
}

TEST(ShardWriter, RejectsTokensOutsideUint16) {
  TempDir dir;
  EXPECT_TRUE(fails_with([&] { write_shard(dir.file("w.bin"), std::vector<int32_t>{1, 70000}); },
                         dir.file("w.bin") + ": token 70000 at position 1 does not fit uint16"));
  EXPECT_TRUE(fails_with([&] { write_shard(dir.file("w.bin"), std::vector<int32_t>{-1}); },
                         "token -1 at position 0"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("w.bin"))) << "nothing written on bad input";
  EXPECT_TRUE(fails_with([&] { write_shard(dir.file("no/such/dir.bin"), ramp(3)); },
                         dir.file("no/such/dir.bin") + ": cannot create shard"));
}

TEST(ShardWriter, SyntheticSourceToShardAndBack) {
  TempDir dir;
  auto markov = make_markov_source(64, 3, 21);
  write_source_shard(dir.file("m.bin"), *markov, 4000);
  EXPECT_EQ(std::filesystem::file_size(dir.file("m.bin")), 1024u + 2u * 4000u);
  // The file holds the source's stream: row 0 of step 0, read as one row.
  Batch expected;
  markov->fill(expected, 1, 3999, BatchIndex{});
  auto shards = make_shard_source(dir.file("m.bin"), 0);
  EXPECT_EQ(shards->vocab_size(), 64) << "4000 tokens of an irreducible chain cover all 64";
  // A row of the whole file (4000 tokens = 3999 positions + 1) has one window.
  Batch back;
  shards->fill(back, 1, 3999, BatchIndex{});
  EXPECT_EQ(back.inputs, expected.inputs);
  EXPECT_EQ(back.targets, expected.targets);
  EXPECT_TRUE(fails_with([&] { write_source_shard(dir.file("m.bin"), *markov, 1); },
                         "a shard needs at least 2 tokens, asked for 1"));
}

TEST(ShardSource, FromConfigChecksVocabulary) {
  TempDir dir;
  std::vector<int32_t> tokens = ramp(200);
  tokens[50] = 50256;  // GPT-2's <|endoftext|>
  write_shard(dir.file("gpt2.bin"), tokens);
  WorkerConfig cfg;
  cfg.data.source = DataSource::Shards;
  cfg.data.shards = dir.file("*.bin");
  cfg.model.vocab_size = 50304;
  auto source = make_source(cfg);
  EXPECT_EQ(source->vocab_size(), 50257);
  cfg.model.vocab_size = 256;
  EXPECT_TRUE(fails_with([&] { make_source(cfg); },
                         "data.shards: '" + dir.file("*.bin") +
                             "' holds token id 50256 but model.vocab_size is 256"));
}

// Only regular files are shards: a FIFO would block the open until a writer
// comes, a directory or device is never a shard.
TEST(ShardSource, PathsThatAreNotRegularFilesAreRefusedNamingThem) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("f.bin").c_str(), 0600), 0);
  EXPECT_TRUE(fails_with([&] { make_shard_source(dir.file("f.bin"), 1); }, dir.file("f.bin") + ": not a regular file (a FIFO)"));
  std::filesystem::create_directory(dir.file("d.bin"));
  EXPECT_TRUE(fails_with([&] { make_shard_source(dir.file("d.bin"), 1); }, dir.file("d.bin") + ": not a regular file (a directory)"));
  EXPECT_TRUE(fails_with([&] { make_shard_source("/dev/null", 1); }, "/dev/null: not a regular file (a character device)"));
}

// A shard that shrinks or is rewritten while mapped is bad data naming the
// file, not a SIGBUS or tokens beyond the vocabulary.
TEST(ShardSource, AShardChangedWhileMappedIsBadData) {
  TempDir dir;
  write_shard(dir.file("a.bin"), ramp(4000, 0));
  auto source = make_shard_source(dir.file("a.bin"), 5);
  Batch b;
  source->fill(b, 4, 16, BatchIndex{});
  std::filesystem::resize_file(dir.file("a.bin"), 1024 + 2 * 100);
  EXPECT_TRUE(fails_with([&] { source->fill(b, 4, 16, BatchIndex{}); },
                         dir.file("a.bin") + ": shard changed while the run reads it (mapped 9024 bytes, the file now has 1224)"));
  // Rewritten in place with the same size but other tokens: the write
  // moved its modification time.
  write_shard(dir.file("b.bin"), ramp(4000, 0));
  auto b_source = make_shard_source(dir.file("b.bin"), 5);
  write_shard(dir.file("b.bin"), std::vector<int32_t>(4000, 60000));
  EXPECT_TRUE(fails_with([&] { b_source->fill(b, 4, 16, BatchIndex{}); },
                         dir.file("b.bin") + ": shard changed while the run reads it (written after it was mapped, "
                                             "at the same size)"));
  // A writer that put the old time back: the change time moved, and the
  // content differs from the CRC-32 taken at open.
  write_shard(dir.file("c.bin"), ramp(4000, 0));
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("c.bin").c_str(), &st), 0);
  auto c_source = make_shard_source(dir.file("c.bin"), 5);
  write_shard(dir.file("c.bin"), ramp(4000, 7));  // valid tokens, other ones
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, dir.file("c.bin").c_str(), times, 0), 0);
  EXPECT_TRUE(fails_with([&] { c_source->fill(b, 4, 16, BatchIndex{}); },
                         dir.file("c.bin") + ": shard changed while the run reads it (rewritten after it was mapped, "
                                             "at the same size and with its old modification time put back"));
  // A chmod moves the change time only: the bytes are the same, reads go on.
  write_shard(dir.file("d.bin"), ramp(4000, 0));
  auto d_source = make_shard_source(dir.file("d.bin"), 5);
  ASSERT_EQ(::chmod(dir.file("d.bin").c_str(), 0444), 0);
  EXPECT_NO_THROW(d_source->fill(b, 4, 16, BatchIndex{}));
  EXPECT_NO_THROW(d_source->fill(b, 4, 16, BatchIndex{}));
}

}  // namespace
}  // namespace weft
