#include "comm/rank_grid.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm/communicator.h"

namespace weft::comm {
namespace {

using V = std::vector<int>;
using ::testing::ElementsAre;

TEST(RankGrid, World8Sp2Wp4ExactGroups) {
  RankGrid g(8, 2, 4);
  EXPECT_EQ(g.dp(), 4);
  EXPECT_EQ(g.wdp(), 2);
  EXPECT_THAT(g.all("sp"), ElementsAre(V{0, 1}, V{2, 3}, V{4, 5}, V{6, 7}));
  EXPECT_THAT(g.all("wp"), ElementsAre(V{0, 1, 2, 3}, V{4, 5, 6, 7}));
  EXPECT_THAT(g.all("wdp"), ElementsAre(V{0, 4}, V{1, 5}, V{2, 6}, V{3, 7}));
  EXPECT_THAT(g.all("dp"), ElementsAre(V{0, 2, 4, 6}, V{1, 3, 5, 7}));
  EXPECT_THAT(g.all("world"), ElementsAre(V{0, 1, 2, 3, 4, 5, 6, 7}));
  RankGroups r5 = g.groups_of(5);
  EXPECT_EQ(r5.sp, (V{4, 5}));
  EXPECT_EQ(r5.wp, (V{4, 5, 6, 7}));
  EXPECT_EQ(r5.wdp, (V{1, 5}));
  EXPECT_EQ(r5.dp, (V{1, 3, 5, 7}));
}

TEST(RankGrid, PureDataParallel) {
  RankGrid g(3, 1, 1);
  for (int r = 0; r < 3; ++r) {
    RankGroups x = g.groups_of(r);
    EXPECT_EQ(x.dp, (V{0, 1, 2}));
    EXPECT_EQ(x.wdp, (V{0, 1, 2}));
    EXPECT_EQ(x.sp, (V{r}));
    EXPECT_EQ(x.wp, (V{r}));
  }
}

TEST(RankGrid, SingleRank) {
  RankGroups x = RankGrid(1, 1, 1).groups_of(0);
  EXPECT_EQ(x.world, (V{0}));
  EXPECT_EQ(x.dp, (V{0}));
}

TEST(RankGrid, EveryRankInExactlyOneGroupOfEachKind) {
  RankGrid g(12, 3, 4);
  for (const char* kind : {"dp", "sp", "wp", "wdp"}) {
    std::vector<int> seen(12, 0);
    for (auto& grp : g.all(kind))
      for (int r : grp) seen[r]++;
    EXPECT_EQ(seen, V(12, 1)) << kind;
  }
}

TEST(RankGrid, RejectsSizesThatDoNotDivide) {
  EXPECT_THROW(
      {
        try {
          RankGrid(6, 4, 1);
        } catch (const CommError& e) {
          EXPECT_THAT(e.what(), ::testing::HasSubstr("parallel.sp: 4 does not divide WORLD_SIZE 6"));
          throw;
        }
      },
      CommError);
  EXPECT_THROW(RankGrid(6, 1, 4), CommError);
  EXPECT_THROW(RankGrid(4, 0, 1), CommError);
  EXPECT_THROW(RankGrid(4, 1, 1).groups_of(4), CommError);
}

}  // namespace
}  // namespace weft::comm
