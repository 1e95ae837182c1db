// weft comm: RankGrid, the ISP/DP topology as a pure function of
// (world, sp, wp) (docs/architecture/isp.md, "Rank grid"). For every rank it names the members
// (global ranks, ascending) of its four groups:
//   sp  - consecutive blocks of sp ranks (split one sequence)
//   wp  - consecutive blocks of wp ranks (shard the weights)
//   wdp - ranks holding the same weight shard: same index within their wp block
//   dp  - ranks with the same sequence slice: same index within their sp block
// Invariants: world % sp == 0 and world % wp == 0 (else ConfigError-style
// CommError naming parallel.sp / parallel.wp); every rank is in exactly one
// group of each kind, and a rank's groups of one kind are identical on every
// member. With sp = wp = 1, dp and wdp are the whole world.
#pragma once

#include <string>
#include <vector>

namespace weft::comm {

struct RankGroups {
  std::vector<int> world, dp, sp, wp, wdp;
};

class RankGrid {
 public:
  // Throws CommError naming the field when the sizes do not divide.
  RankGrid(int world, int sp, int wp);

  int world() const { return world_; }
  int sp() const { return sp_; }
  int wp() const { return wp_; }
  int dp() const { return world_ / sp_; }    // size of each dp group
  int wdp() const { return world_ / wp_; }   // size of each wdp group

  RankGroups groups_of(int rank) const;
  // All distinct groups of one kind ("dp", "sp", "wp", "wdp", "world"), in
  // order of their lowest rank.
  std::vector<std::vector<int>> all(const std::string& kind) const;

 private:
  int world_, sp_, wp_;
};

}  // namespace weft::comm
