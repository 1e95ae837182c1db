#include "comm/rank_grid.h"

#include "comm/communicator.h"

namespace weft::comm {
namespace {

// Ranks r' with r' / block == r / block.
std::vector<int> block_of(int rank, int block) {
  std::vector<int> g;
  for (int i = rank / block * block; i < (rank / block + 1) * block; ++i) g.push_back(i);
  return g;
}

// Ranks r' with r' % block == r % block.
std::vector<int> stride_of(int rank, int block, int world) {
  std::vector<int> g;
  for (int i = rank % block; i < world; i += block) g.push_back(i);
  return g;
}

}  // namespace

RankGrid::RankGrid(int world, int sp, int wp) : world_(world), sp_(sp), wp_(wp) {
  if (world < 1) throw CommError("WORLD_SIZE must be at least 1, got " + std::to_string(world));
  if (sp < 1) throw CommError("parallel.sp must be at least 1, got " + std::to_string(sp));
  if (wp < 1) throw CommError("parallel.wp must be at least 1, got " + std::to_string(wp));
  if (world % sp != 0)
    throw CommError("parallel.sp: " + std::to_string(sp) + " does not divide WORLD_SIZE " +
                    std::to_string(world));
  if (world % wp != 0)
    throw CommError("parallel.wp: " + std::to_string(wp) + " does not divide WORLD_SIZE " +
                    std::to_string(world));
}

RankGroups RankGrid::groups_of(int rank) const {
  if (rank < 0 || rank >= world_)
    throw CommError("RANK " + std::to_string(rank) + " is outside WORLD_SIZE " + std::to_string(world_));
  RankGroups g;
  g.world = block_of(rank, world_);
  g.sp = block_of(rank, sp_);
  g.wp = block_of(rank, wp_);
  g.dp = stride_of(rank, sp_, world_);
  g.wdp = stride_of(rank, wp_, world_);
  return g;
}

std::vector<std::vector<int>> RankGrid::all(const std::string& kind) const {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < world_; ++r) {
    RankGroups g = groups_of(r);
    const std::vector<int>* m = kind == "world" ? &g.world : kind == "dp" ? &g.dp
                              : kind == "sp" ? &g.sp : kind == "wp" ? &g.wp
                              : kind == "wdp" ? &g.wdp : nullptr;
    if (!m) throw CommError("RankGrid: unknown group kind '" + kind + "'");
    if (m->front() == r) out.push_back(*m);
  }
  return out;
}

}  // namespace weft::comm
