// Host staging's layout (comm/staged_communicator.h): where each device
// buffer of a collective lives in host memory. Aliasing must survive the trip
// (ZeRO's in-place all-gather and reduce-scatter shares), and disjoint
// buffers must not share a byte.
#include <gtest/gtest.h>

#include "comm/staged_communicator.h"

namespace weft::comm {
namespace {

TEST(StagingPlan, OneBufferCollectivesStageOnce) {
  alignas(64) char buf[256] = {};
  StagingPlan p = plan_staging(buf, 256, nullptr, 0);
  EXPECT_EQ(p.bytes, 256u);
  EXPECT_EQ(p.input_at, 0u);
  EXPECT_EQ(p.output_at, 0u);
  p = plan_staging(buf, 256, buf, 256);
  EXPECT_EQ(p.bytes, 256u);
  EXPECT_EQ(p.output_at, 0u);
}

TEST(StagingPlan, AnInPlaceShareKeepsItsOffset) {
  alignas(64) char buf[400] = {};
  // reduce-scatter: the output is rank 2's share inside the input.
  StagingPlan rs = plan_staging(buf, 400, buf + 200, 100);
  EXPECT_EQ(rs.bytes, 400u);
  EXPECT_EQ(rs.input_at, 0u);
  EXPECT_EQ(rs.output_at, 200u);
  // all-gather: the input is rank 1's share inside the output.
  StagingPlan ag = plan_staging(buf + 100, 100, buf, 400);
  EXPECT_EQ(ag.bytes, 400u);
  EXPECT_EQ(ag.output_at, 0u);
  EXPECT_EQ(ag.input_at, 100u);
}

TEST(StagingPlan, DisjointBuffersFollowEachOtherAligned) {
  alignas(64) char in[100] = {}, out[300] = {};
  StagingPlan p = plan_staging(in, 100, out, 300);
  EXPECT_EQ(p.input_at, 0u);
  EXPECT_EQ(p.output_at, 128u) << "the output starts 64-byte aligned after the input";
  EXPECT_EQ(p.bytes, 428u);
}

TEST(StagingPlan, PartialOverlapIsRefused) {
  alignas(64) char buf[400] = {};
  EXPECT_THROW(plan_staging(buf, 200, buf + 100, 200), CommError);
}

}  // namespace
}  // namespace weft::comm
