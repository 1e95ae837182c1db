#include "parallel/grad_buckets.h"

#include <gtest/gtest.h>

#include "model/llama.h"
#include "parallel/bucket_cap_file.h"
#include "support/run_process.h"

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

TEST(BucketCapFile, RejectsMalformedAndOutOfRangeValuesAndCountsThem) {
  auto dir = testing::fresh_dir("capfile-reject");
  std::string path = (dir / "bucket_cap_mb").string();
  BucketCapFile f(path);
  const char* bad[] = {"", "abc", "12MB", "nan", "inf", "1e999", "-4", "0", "-0", "1e-400", "104857600", "8 9"};
  int64_t n = 0;
  for (const char* text : bad) {
    testing::write_file(path, text);
    EXPECT_FALSE(f.poll().has_value()) << "'" << text << "'";
    EXPECT_EQ(f.rejected(), ++n) << "'" << text << "'";
    EXPECT_FALSE(f.poll().has_value());
    EXPECT_EQ(f.rejected(), n) << "the same content is counted once";
  }
  testing::write_file(path, "65536");
  EXPECT_EQ(f.poll(), 65536.0) << "the upper bound itself is valid";
  testing::write_file(path, "1e-9");
  EXPECT_EQ(f.poll(), 1e-9) << "tiny caps are valid: a bucket per parameter";
  EXPECT_EQ(f.rejected(), n);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weft
