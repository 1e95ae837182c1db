#include "parallel/grad_buckets.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "model/llama.h"
#include "parallel/bucket_cap_file.h"
#include "support/run_process.h"
#include "weft_contract.h"

namespace weft {
namespace {

ModelConfig known_model() {
  ModelConfig m;
  m.vocab_size = 32;
  m.d_model = 32;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;  // k/v: 16 x 32
  m.max_seq_len = 16;  // ffn() = 96
  return m;
}

struct Expect {
  int first, last;
  int64_t begin, end;
};

// Worked by hand from the layout: lm_head 1024, norm 32, then per layer
// down/up/gate 3072, post-norm 32, o 1024, v 512, k 512, q 1024, in-norm 32,
// then the embedding 1024 (26784 floats).
TEST(GradBuckets, ExactLayoutForKnownModel) {
  auto params = llama_param_table(known_model());
  ASSERT_EQ(params.back().offset + params.back().numel, 26784);
  const double cap_mb = 4096 * 4.0 / (1 << 20), first_mb = 1024 * 4.0 / (1 << 20);
  auto b = plan_buckets(params, cap_mb, first_mb, 3);
  const Expect want[] = {{0, 0, 0, 1024},         {1, 3, 1024, 7200},      {4, 6, 7200, 11328},
                         {7, 11, 11328, 16480},   {12, 13, 16480, 22624},  {14, 20, 22624, 26784}};
  ASSERT_EQ(b.size(), 6u) << describe_buckets(b);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(b[i].index, i);
    EXPECT_EQ(b[i].first_param, want[i].first) << "bucket " << i;
    EXPECT_EQ(b[i].last_param, want[i].last) << "bucket " << i;
    EXPECT_EQ(b[i].begin, want[i].begin) << "bucket " << i;
    EXPECT_EQ(b[i].end, want[i].end) << "bucket " << i;
    EXPECT_EQ(b[i].padded_numel % 3, 0);
    EXPECT_LT(b[i].padded_numel - b[i].numel(), 3);
  }
  // Shards of bucket 0 (1024 -> padded 1026): 342 each, the last one short.
  EXPECT_EQ(b[0].padded_numel, 1026);
  EXPECT_EQ(b[0].shard_begin(1, 3), 342);
  EXPECT_EQ(b[0].shard_end(2, 3), 1024);
}

// parallel.bucket_cap_mb: auto. A pure function of the gradient bytes and
// the group size, so every rank of a group resolves the same sizes.
TEST(GradBuckets, AutoSizingAimsAtAboutThirtyTwoBucketsWithinBounds) {
  const int64_t mib = 1 << 20;
  // 52 MiB of gradients (the 13.7 M-parameter DP benchmark): 52 / 32 = 1.625,
  // rounded up to a quarter MiB.
  BucketSizing s = auto_bucket_sizing(52 * mib, 2);
  EXPECT_TRUE(s.automatic);
  EXPECT_EQ(s.cap_mb, 1.75);
  EXPECT_EQ(s.first_bucket_mb, kAutoFirstBucketMb);
  EXPECT_EQ(s.last_bucket_mb, kAutoLastBucketMb);
  EXPECT_EQ(auto_bucket_sizing(64 * mib, 8).cap_mb, 2);
  EXPECT_EQ(auto_bucket_sizing(64 * mib + 1, 8).cap_mb, 2.25);
  // Small models: never below the minimum, first and last buckets no larger than the cap.
  s = auto_bucket_sizing(2 * mib, 2);
  EXPECT_EQ(s.cap_mb, kAutoMinCapMb);
  EXPECT_LE(s.first_bucket_mb, s.cap_mb);
  EXPECT_LE(s.last_bucket_mb, s.cap_mb);
  EXPECT_EQ(auto_bucket_sizing(0, 2).cap_mb, kAutoMinCapMb);
  // Large models (gpt2-124m's 474 MiB: 14.8 MiB; 1 GiB: the maximum).
  EXPECT_EQ(auto_bucket_sizing(474 * mib, 8).cap_mb, 15);
  EXPECT_EQ(auto_bucket_sizing(1024 * mib, 2).cap_mb, kAutoMaxCapMb);
  // One rank: nothing to hide, the fewest buckets.
  s = auto_bucket_sizing(52 * mib, 1);
  EXPECT_EQ(s.cap_mb, kAutoMaxCapMb);
  EXPECT_EQ(s.first_bucket_mb, 0);
  EXPECT_EQ(s.last_bucket_mb, 0);
  // Between the bounds the plan has about kAutoBucketCount buckets.
  for (int64_t bytes : {52 * mib, 200 * mib, 390 * mib, 790 * mib}) {
    BucketSizing a = auto_bucket_sizing(bytes, 2);
    const double count = 1 + (bytes / double(mib) - a.first_bucket_mb) / a.cap_mb;
    EXPECT_GE(count, 0.9 * kAutoBucketCount) << bytes;
    EXPECT_LE(count, kAutoBucketCount + 1) << bytes;
  }
}

TEST(GradBuckets, ResolveKeepsNumbersAndSizesAutoFromTheLayout) {
  auto params = llama_param_table(known_model());  // 26784 floats, ~0.1 MiB
  BucketSizing fixed = resolve_bucket_sizing(params, 4, 0, 2);
  EXPECT_FALSE(fixed.automatic);
  EXPECT_EQ(fixed.cap_mb, 4);
  EXPECT_EQ(fixed.first_bucket_mb, 0);
  EXPECT_EQ(resolve_bucket_sizing(params, 0.5, 1, 2).first_bucket_mb, 1);
  BucketSizing a = resolve_bucket_sizing(params, 0, 0, 2);
  EXPECT_TRUE(a.automatic);
  EXPECT_EQ(a.cap_mb, auto_bucket_sizing(26784 * 4, 2).cap_mb);
  EXPECT_EQ(a.first_bucket_mb, auto_bucket_sizing(26784 * 4, 2).first_bucket_mb);
  // An explicit first bucket wins over the rule's.
  EXPECT_EQ(resolve_bucket_sizing(params, 0, 0.25, 2).first_bucket_mb, 0.25);
  EXPECT_NE(a.describe().find("auto"), std::string::npos) << a.describe();
  // The tuner's later cap: no longer auto, the rule's first bucket within it.
  BucketSizing tuned = a.with_cap(0.5);
  EXPECT_FALSE(tuned.automatic);
  EXPECT_EQ(tuned.cap_mb, 0.5);
  EXPECT_EQ(tuned.first_bucket_mb, 0.5);
  EXPECT_EQ(a.with_cap(a.cap_mb).automatic, true);
  // An explicit pair is kept as configured under a new cap.
  EXPECT_EQ(resolve_bucket_sizing(params, 0.5, 1, 2).with_cap(0.25).first_bucket_mb, 1);
}

TEST(GradBuckets, LastBucketIsTheShortestTailHoldingItsSize) {
  auto params = llama_param_table(known_model());
  const int n = static_cast<int>(params.size());
  const double floats = 4.0 / (1 << 20);  // MiB per float
  // The embedding (1024 floats) alone reaches 1024: it gets its own bucket.
  auto b = plan_buckets(params, 25, 0, 2, 1024 * floats);
  ASSERT_EQ(b.size(), 2u) << describe_buckets(b);
  EXPECT_EQ(b[0].last_param, n - 2);
  EXPECT_EQ(b[1].first_param, n - 1);
  EXPECT_EQ(b[1].numel(), 1024);
  // 1100 takes the embedding, layer 0's input norm (32) and q (1024).
  b = plan_buckets(params, 25, 0, 2, 1100 * floats);
  ASSERT_EQ(b.size(), 2u) << describe_buckets(b);
  EXPECT_EQ(b[1].first_param, n - 3);
  EXPECT_EQ(b[1].numel(), 2080);
  // Without it (0) the cap alone decides, as before.
  EXPECT_EQ(plan_buckets(params, 25, 0, 2, 0).size(), 1u);
  // A tail larger than everything is one bucket.
  EXPECT_EQ(plan_buckets(params, 25, 0, 2, 1.0).size(), 1u);
  // The rule sets one; a tuned cap keeps it (no larger than the cap).
  BucketSizing a = auto_bucket_sizing(52 << 20, 2);
  EXPECT_EQ(a.last_bucket_mb, kAutoLastBucketMb);
  EXPECT_EQ(a.with_cap(0.5).last_bucket_mb, 0.5);
  EXPECT_EQ(resolve_bucket_sizing(params, 4, 0, 2).last_bucket_mb, 0);
}

TEST(GradBuckets, ExtremesAndCoverage) {
  auto params = llama_param_table(known_model());
  auto one_each = plan_buckets(params, 1e-9, 0, 2);
  ASSERT_EQ(one_each.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(one_each[i].num_params(), 1);
  auto all = plan_buckets(params, 25, 0, 4);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].numel(), 26784);
  EXPECT_EQ(all[0].padded_numel, 26784);
  for (double cap : {0.001, 0.01, 0.05}) {
    auto bs = plan_buckets(params, cap, 0.002, 4);
    int64_t at = 0;
    int next = 0;
    for (const Bucket& bk : bs) {
      EXPECT_EQ(bk.begin, at);
      EXPECT_EQ(bk.first_param, next);
      at = bk.end;
      next = bk.last_param + 1;
    }
    EXPECT_EQ(at, 26784);
    EXPECT_EQ(next, static_cast<int>(params.size()));
  }
}

TEST(BucketCapFile, ReportsChangesOnlyAndIgnoresGarbage) {
  auto dir = testing::fresh_dir("capfile");
  std::string path = (dir / "bucket_cap_mb").string();
  BucketCapFile f(path);
  EXPECT_FALSE(f.poll().has_value()) << "missing file is not a request";
  testing::write_file(path, "8\n");
  EXPECT_EQ(f.poll(), 8.0);
  EXPECT_FALSE(f.poll().has_value()) << "unchanged";
  testing::write_file(path, "zero");
  EXPECT_FALSE(f.poll().has_value());
  testing::write_file(path, "-1");
  EXPECT_FALSE(f.poll().has_value());
  testing::write_file(path, " 0.5 ");
  EXPECT_EQ(f.poll(), 0.5);
  std::filesystem::remove_all(dir);
}

// The operator writes an empty value for bucket_cap_mb auto: no size asked
// for, nothing rejected, and the tuner's first number is a change.
TEST(BucketCapFile, EmptyAsksForNothing) {
  auto dir = testing::fresh_dir("capfile-empty");
  std::string path = (dir / "bucket_cap_mb").string();
  BucketCapFile f(path);
  for (const char* text : {"", "\n", "  "}) {
    testing::write_file(path, text);
    EXPECT_FALSE(f.poll().has_value()) << "'" << text << "'";
  }
  EXPECT_EQ(f.rejected(), 0);
  testing::write_file(path, "1.75");
  EXPECT_EQ(f.poll(), 1.75);
  std::filesystem::remove_all(dir);
}

TEST(BucketCapFile, RejectsMalformedAndOutOfRangeValuesAndCountsThem) {
  auto dir = testing::fresh_dir("capfile-reject");
  std::string path = (dir / "bucket_cap_mb").string();
  BucketCapFile f(path);
  const char* bad[] = {"abc", "12MB", "nan", "inf", "1e999", "-4", "0", "-0", "1e-400", "104857600", "4097", "1e14", "8 9"};
  int64_t n = 0;
  for (const char* text : bad) {
    testing::write_file(path, text);
    EXPECT_FALSE(f.poll().has_value()) << "'" << text << "'";
    EXPECT_EQ(f.rejected(), ++n) << "'" << text << "'";
    EXPECT_FALSE(f.poll().has_value());
    EXPECT_EQ(f.rejected(), n) << "the same content is counted once";
  }
  testing::write_file(path, "4096");
  EXPECT_EQ(f.poll(), contract::kMaxBucketCapMb) << "the upper bound itself is valid";
  testing::write_file(path, "1e-9");
  EXPECT_EQ(f.poll(), 1e-9) << "tiny caps are valid: a bucket per parameter";
  EXPECT_EQ(f.rejected(), n);
  std::filesystem::remove_all(dir);
}

// The file's bytes reach the log only as printable text: an escape sequence
// or a newline in it could rewrite a terminal or forge a log line.
TEST(BucketCapFile, ControlBytesAreNotEchoedIntoTheLog) {
  auto dir = testing::fresh_dir("capfile-ctl");
  std::string path = (dir / "bucket_cap_mb").string();
  BucketCapFile f(path);
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
  spdlog::default_logger()->sinks().push_back(sink);
  testing::write_file(path, "8\x1b[2J\n[info] step 9 done\x07");
  EXPECT_FALSE(f.poll().has_value());
  spdlog::default_logger()->sinks().pop_back();
  std::string log;
  for (auto& line : sink->last_formatted()) log += line;
  EXPECT_NE(log.find("rejected bucket cap '8\\x1b[2J\\x0a[info] step 9 done\\x07'"), std::string::npos) << log;
  EXPECT_EQ(log.find('\x1b'), std::string::npos) << log;
  EXPECT_EQ(log.find('\x07'), std::string::npos) << log;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weft
