// The in-process Communicator fake against the expectations the Gloo backend
// meets across processes (support/collective_checks.h, run by
// tests/comm/collectives_test.cc), plus what only threads can show cheaply:
// Gloo's reduction arithmetic, asynchrony, timing, stats, and that a wrong
// collective order fails with a clear error instead of hanging.
#include "support/fake_communicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "tensor/bf16.h"
#include "support/collective_checks.h"
#include "support/random.h"

namespace weft::testing {
namespace {

using comm::CommError;
using comm::CommunicatorPtr;
using comm::ReduceOp;
using comm::WorkPtr;
using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

FakeGroupOptions with_timeout(std::chrono::milliseconds t) {
  FakeGroupOptions o;
  o.timeout = t;
  return o;
}

class FakeCollectives : public ::testing::TestWithParam<CollectiveGrid> {};

// As tests/comm/collectives_test.cc: every collective on every group of the
// grid, issued on all groups before any wait.
TEST_P(FakeCollectives, MatchReferenceOnEveryGroup) {
  const CollectiveGrid c = GetParam();
  auto ranks = fake_grid(comm::RankGrid(c.world, c.sp, c.wp));
  run_ranks(c.world, [&](int rank) {
    const FakeRankGroups& g = ranks[rank];
    CollectiveChecks all;
    for (const CommunicatorPtr& comm : {g.world, g.dp, g.sp, g.wp, g.wdp}) all.issue_all(*comm);
    for (const WorkPtr& w : all.works()) w->wait();
    for (const WorkPtr& w : all.works()) EXPECT_TRUE(w->completed());
    auto wrong = all.verify();
    EXPECT_TRUE(wrong.empty()) << "rank " << rank << ": " << wrong.size() << " mismatches, first "
                               << wrong.front();
    EXPECT_GT(all.checks(), 0u);
    comm::CommStats st = g.world->stats();
    EXPECT_EQ(st.by_op["all_reduce"].count,
              static_cast<uint64_t>(CollectiveChecks::kAllReducesPerGroup));
    EXPECT_GT(st.by_op["all_reduce"].bytes, 0u);
  });
}

INSTANTIATE_TEST_SUITE_P(Grids, FakeCollectives, ::testing::ValuesIn(collective_grids()),
                         [](const auto& info) { return grid_name(info.param); });

TEST(FakeGroup, MembersCarryTheGroupsNameRanksAndGlobalRanks) {
  auto g = FakeGroup::create(2, "dp", {.members = {1, 3}});
  EXPECT_EQ(g->member(1)->rank(), 1);
  EXPECT_EQ(g->member(1)->size(), 2);
  EXPECT_EQ(g->member(0)->name(), "dp");
  EXPECT_EQ(g->member(0)->members(), (std::vector<int>{1, 3}));
  EXPECT_THROW(g->member(2), CommError);
  EXPECT_THROW(FakeGroup::create(3, "dp", {.members = {0, 1}}), CommError);
}

// f32 sums add in group-rank order; bf16 rounds after every addition and Avg
// multiplies by 1/size, as Gloo's sum_f32/sum_bf16/scale do.
TEST(FakeArithmetic, SumsAddInRankOrderLikeGloosReductionFunctions) {
  const int n = 4;
  const int64_t len = 257;
  std::vector<std::vector<float>> x(n);
  for (int r = 0; r < n; ++r) x[r] = random_uniform_f32(len, 100 + r, -1000.0f, 1000.0f);
  std::vector<float> sum(len), avg(len);
  for (int64_t i = 0; i < len; ++i) {
    float acc = x[0][i];
    for (int r = 1; r < n; ++r) acc = acc + x[r][i];
    sum[i] = acc;
    avg[i] = acc * (1.0f / n);
  }
  auto g = FakeGroup::create(n, "dp");
  run_ranks(n, [&](int r) {
    std::vector<float> s = x[r], a = x[r];
    g->member(r)->all_reduce(Tensor::f32(s.data(), Shape{len}), ReduceOp::Sum)->wait();
    g->member(r)->all_reduce(Tensor::f32(a.data(), Shape{len}), ReduceOp::Avg)->wait();
    for (int64_t i = 0; i < len; ++i) {
      ASSERT_EQ(s[i], sum[i]) << "rank " << r << " i=" << i;
      ASSERT_EQ(a[i], avg[i]) << "rank " << r << " i=" << i;
    }
  });
}

TEST(FakeArithmetic, Bf16RoundsAfterEveryAddition) {
  // 256 + 1 is a tie in bf16 (spacing 2) and rounds to even, 256; twice. One
  // rounding of the exact sum would give 258.
  const float in[3] = {256, 1, 1};
  auto g = FakeGroup::create(3, "dp");
  std::vector<uint16_t> out(3);
  run_ranks(3, [&](int r) {
    uint16_t h = weft::f32_to_bf16(in[r]);
    g->member(r)->all_reduce(Tensor(&h, DType::BF16, Shape{1}), ReduceOp::Sum)->wait();
    out[r] = h;
  });
  for (uint16_t h : out) EXPECT_EQ(weft::bf16_to_f32(h), 256.0f);
}

TEST(FakeAsync, WorkCompletesOnlyOnceEveryMemberIssued) {
  auto g = FakeGroup::create(2, "dp");
  std::promise<void> checked;
  std::vector<float> a = {1, 2}, b = {10, 20};
  run_ranks(2, [&](int r) {
    if (r == 0) {
      WorkPtr w = g->member(0)->all_reduce(Tensor::f32(a.data(), Shape{2}), ReduceOp::Sum);
      EXPECT_FALSE(w->completed());
      EXPECT_EQ(w->comm_seconds(), 0.0);
      EXPECT_EQ(a[0], 1.0f);  // nothing moved yet
      checked.set_value();
      w->wait();
      EXPECT_TRUE(w->completed());
    } else {
      checked.get_future().wait();
      g->member(1)->all_reduce(Tensor::f32(b.data(), Shape{2}), ReduceOp::Sum)->wait();
    }
  });
  EXPECT_EQ(a, (std::vector<float>{11, 22}));
  EXPECT_EQ(b, (std::vector<float>{11, 22}));
}

TEST(FakeAsync, CommSecondsIncludeWaitingForASlowPeerAndStatsCountEveryMember) {
  auto g = FakeGroup::create(2, "dp");
  std::vector<std::vector<float>> in = {std::vector<float>(8, 1.0f), std::vector<float>(8, 2.0f)};
  std::vector<std::vector<float>> out = {std::vector<float>(4), std::vector<float>(4)};
  double early_seconds = 0;
  std::promise<void> rank0_issued;
  run_ranks(2, [&](int r) {
    if (r == 1) {  // arrives at least 50 ms after rank 0
      rank0_issued.get_future().wait();
      std::this_thread::sleep_for(50ms);
    }
    WorkPtr w = g->member(r)->reduce_scatter(Tensor::f32(in[r].data(), Shape{8}),
                                             Tensor::f32(out[r].data(), Shape{4}), ReduceOp::Sum);
    if (r == 0) rank0_issued.set_value();
    w->wait();
    if (r == 0) early_seconds = w->comm_seconds();
    EXPECT_GE(w->enqueue_to_start_seconds(), 0.0);
    // A dropped handle still counts: stats come from the group, not the Work.
    g->member(r)->barrier();
  });
  EXPECT_GE(early_seconds, 0.05);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(out[r], std::vector<float>(4, 3.0f));
    comm::CommStats st = g->member(r)->stats();
    EXPECT_EQ(st.by_op["reduce_scatter"].count, 1u);
    EXPECT_EQ(st.by_op["reduce_scatter"].bytes, 8 * sizeof(float));  // the full input
    EXPECT_EQ(st.by_op["barrier"].count, 1u);
    EXPECT_EQ(st.by_op["barrier"].bytes, 0u);
  }
}

// Each outcome of one member's wait, for the failure tests.
std::string error_of(const WorkPtr& w) {
  try {
    w->wait();
  } catch (const CommError& e) {
    return e.what();
  }
  return "";
}

TEST(FakeFailures, DifferentCollectivesAtOnePositionFailEveryMemberAtOnce) {
  auto g = FakeGroup::create(2, "dp", with_timeout(60s));
  std::vector<std::string> first(2), later(2);
  const auto t0 = std::chrono::steady_clock::now();
  run_ranks(2, [&](int r) {
    float x[4] = {0, 0, 0, 0};
    Tensor t = Tensor::f32(x, Shape{4});
    first[r] = error_of(r == 0 ? g->member(0)->all_reduce(t, ReduceOp::Sum, "bucket 1")
                               : g->member(1)->broadcast(t, 0, "params"));
    later[r] = error_of(g->member(r)->barrier());
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "detected at once, not by the timeout";
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(first[r], AllOf(HasSubstr("fake group dp: collective #0 differs between members"),
                                HasSubstr("all_reduce(sum, 4 x f32) 'bucket 1'"),
                                HasSubstr("broadcast(root 0, 4 x f32) 'params'")));
    EXPECT_EQ(later[r], first[r]) << "a failed group fails every later collective";
  }
}

TEST(FakeFailures, DifferentSizesOfTheSameCollectiveAreAMismatch) {
  auto g = FakeGroup::create(2, "dp", with_timeout(60s));
  std::vector<std::string> err(2);
  run_ranks(2, [&](int r) {
    std::vector<float> x(r == 0 ? 4 : 6);
    err[r] = error_of(g->member(r)->all_reduce(
        Tensor::f32(x.data(), Shape{static_cast<int64_t>(x.size())}), ReduceOp::Sum));
  });
  EXPECT_THAT(err[0],
              AllOf(HasSubstr("all_reduce(sum, 4 x f32)"), HasSubstr("all_reduce(sum, 6 x f32)")));
  EXPECT_EQ(err[1], err[0]);
}

TEST(FakeFailures, AMissingCollectiveTimesOutNamingWhoIsMissing) {
  auto g = FakeGroup::create(3, "wp", with_timeout(300ms));
  std::vector<std::string> err(3);
  run_ranks(3, [&](int r) {
    float x = 1;
    Tensor t = Tensor::f32(&x, Shape{1});
    g->member(r)->all_reduce(t, ReduceOp::Sum, "bucket 0")->wait();
    if (r == 2) return;  // rank 2 skips the second collective
    err[r] = error_of(g->member(r)->all_reduce(t, ReduceOp::Sum, "bucket 1"));
  });
  for (int r : {0, 1})
    EXPECT_THAT(err[r],
                AllOf(HasSubstr("fake group wp: collective #1 all_reduce(sum, 1 x f32) 'bucket 1'"),
                      HasSubstr("timed out after 300 ms"),
                      HasSubstr("waiting for "),  // rank 1 too, if it was slower than 300 ms
                      HasSubstr("rank 2 (last issued #0 all_reduce(sum, 1 x f32) 'bucket 0')")));
}

TEST(FakeFailures, AllToAllCountsThatDisagreeAcrossMembersFail) {
  auto g = FakeGroup::create(2, "sp", with_timeout(60s));
  std::vector<std::string> err(2);
  run_ranks(2, [&](int r) {
    // Rank 0 sends 1 element to rank 1, which expects 2 from it.
    std::vector<int64_t> send = r == 0 ? std::vector<int64_t>{3, 1} : std::vector<int64_t>{2, 2};
    std::vector<int64_t> recv = r == 0 ? std::vector<int64_t>{3, 2} : std::vector<int64_t>{2, 2};
    std::vector<float> in(4), out(r == 0 ? 5 : 4);
    err[r] = error_of(g->member(r)->all_to_all(
        Tensor::f32(in.data(), Shape{4}),
        Tensor::f32(out.data(), Shape{static_cast<int64_t>(out.size())}), send, recv));
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_THAT(err[r], HasSubstr("rank 0 sends 1 elements to rank 1, which expects 2"));
}

TEST(FakeFailures, BadArgumentsThrowFromTheIssuingCallAsOnGloo) {
  auto g = FakeGroup::create(2, "dp");
  CommunicatorPtr c = g->member(0);
  std::vector<float> f(6);
  std::vector<uint16_t> h(3);
  Tensor f6 = Tensor::f32(f.data(), Shape{6}), f3 = Tensor::f32(f.data(), Shape{3});
  Tensor h3(h.data(), DType::BF16, Shape{3});
  auto message = [](const std::function<void()>& issue) {
    try {
      issue();
    } catch (const CommError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message([&] { c->reduce_scatter(f6, h3, ReduceOp::Sum); }),
              HasSubstr("reduce_scatter on group dp: input and output dtypes differ"));
  EXPECT_THAT(
      message([&] { c->reduce_scatter(Tensor::f32(f.data(), Shape{5}), f3, ReduceOp::Sum); }),
      HasSubstr("5 elements do not split evenly over 2 ranks"));
  EXPECT_THAT(message([&] { c->all_gather(f6, f6); }),
              HasSubstr("input holds 6 elements, rank 0's share is 3"));
  EXPECT_THAT(message([&] { c->all_to_all(f6, f6); }), HasSubstr("must not alias"));
  EXPECT_THAT(message([&] { c->broadcast(f3, 2); }), HasSubstr("root 2 is not a group rank"));
  int32_t ints[2];
  EXPECT_THAT(message([&] { c->all_reduce(Tensor::i32(ints, Shape{2}), ReduceOp::Sum); }),
              HasSubstr("only f32 and bf16"));
  EXPECT_THAT(message([&] {
                c->all_reduce(Tensor(f.data(), DType::F32, Shape{6}, Device::CUDA), ReduceOp::Sum);
              }),
              HasSubstr("host memory only"));
  // Nothing was issued: the group still works.
  run_ranks(2, [&](int r) {
    float x = 1;
    g->member(r)->all_reduce(Tensor::f32(&x, Shape{1}), ReduceOp::Sum)->wait();
    EXPECT_EQ(x, 2.0f);
  });
}

}  // namespace
}  // namespace weft::testing
