// Test support: the expectations every Communicator is held to. Issues every
// collective (f32 and bf16, Sum and Avg, equal and uneven counts, in place and
// not, at offsets inside guarded buffers) on a communicator without waiting,
// and checks each result against a reference computed from the inputs. The
// Gloo backend meets them across processes (tests/comm, weft_comm_rank), the
// in-process fake across threads (tests/support).
// defines: CollectiveGrid, collective_grids, grid_name, CollectiveChecks.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace weft::testing {

// The rank grids both backends are checked on: 1-4 ranks, each group kind
// (dp, sp, wp, wdp) larger than one rank in some grid.
struct CollectiveGrid {
  int world, sp, wp;
};
std::vector<CollectiveGrid> collective_grids();
std::string grid_name(const CollectiveGrid& g);  // "world4_sp2_wp1"

class CollectiveChecks {
 public:
  // Issues the collectives on `c` (every member of its group must call this
  // for the group in the same order); appends their Work to works().
  void issue_all(comm::Communicator& c);
  const std::vector<comm::WorkPtr>& works() const { return works_; }
  size_t checks() const { return checks_.size(); }
  // After every Work completed: one line per wrong element or overwritten
  // guard ("all_reduce world[0..] f32 sum i=5: got 3 want 4"); empty if all
  // results are right.
  std::vector<std::string> verify() const;

  // Collectives issue_all() issues on one communicator, per kind.
  static constexpr int kAllReducesPerGroup = 4;

 private:
  // Collects a line for every |got - want| > tol.
  struct Mismatches {
    std::vector<std::string> lines;
    void operator()(const std::string& what, double got, double want, double tol = 0);
  };
  struct Check {
    std::string name;
    std::function<void(Mismatches&)> verify;
  };
  std::vector<comm::WorkPtr> works_;
  std::vector<Check> checks_;
  std::vector<std::shared_ptr<void>> buffers_;  // alive until the collectives ran
};

}  // namespace weft::testing
