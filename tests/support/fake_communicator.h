// Test support: an in-process Communicator for fast unit tests of what runs on
// top of comm (gradient sync strategies): the N members of a FakeGroup are
// threads of one process, and collectives move host memory directly.
// defines: FakeGroupOptions, FakeGroup, FakeRankGroups, fake_grid, run_ranks.
//
//   auto group = FakeGroup::create(4, "dp");
//   run_ranks(4, [&](int rank) {
//     CommunicatorPtr dp = group->member(rank);
//     dp->all_reduce(grads, ReduceOp::Avg, "bucket 0")->wait();
//   });
//
// Semantics are the Gloo backend's (comm/gloo_communicator.cc), which the
// multi-process tests in tests/comm prove:
//  - Members must issue the same collectives in the same order; the n-th
//    collective of every member meets the others' n-th. Issuing never blocks;
//    the member that issues last runs the collective inside its call and
//    completes every member's Work. wait() blocks until then.
//  - Argument errors (dtype, counts, shares, aliasing, root) throw CommError
//    from the issuing call, as Gloo's do.
//  - Sums add in group-rank order; bf16 is added in f32 and rounded to bf16
//    after every addition; Avg multiplies the sum by 1/size, all as Gloo's
//    reduction functions do. (Gloo's ring adds in another order, so with 3+
//    members only exactly representable sums are bit-identical to Gloo's.)
//  - stats() counts each completed collective with this member's input bytes;
//    comm_seconds() runs from when the collective could start on this member
//    (issued, and its previous collective done) until it completed, so it
//    includes waiting for slow peers, as on Gloo's comm thread.
//
// Failures behave like Gloo under FailurePolicy::Throw, with no process exit:
// members that issue different collectives at the same position (op, dtype,
// element counts, reduce op, root) fail at once, and a wait() that outlasts
// `timeout` (a member never issued the collective) fails naming the members
// that are missing and what each issued last. Either way every pending and
// later Work of the group throws CommError from wait(), so no member hangs.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/rank_grid.h"

namespace weft::testing {

struct FakeGroupOptions {
  std::vector<int> members;                  // global ranks in group order; empty: 0 .. size-1
  std::chrono::milliseconds timeout{10000};  // how long wait() waits for the others
};

class FakeGroup {
 public:
  static std::shared_ptr<FakeGroup> create(int size, std::string name = "world",
                                           FakeGroupOptions opt = {});
  int size() const { return static_cast<int>(members_.size()); }
  // Group rank r's communicator; it keeps the group's shared state alive.
  comm::CommunicatorPtr member(int rank) const;

  struct State;  // the rendezvous of the members (fake_communicator.cc)

 private:
  FakeGroup() = default;
  std::vector<comm::CommunicatorPtr> members_;
};

// One rank's groups of a RankGrid, as comm::ProcessGroups holds them.
struct FakeRankGroups {
  comm::CommunicatorPtr world, dp, sp, wp, wdp;
};
// Fake groups for every rank of `grid` (result[global rank]); opt.members is
// ignored (the grid decides them).
std::vector<FakeRankGroups> fake_grid(const comm::RankGrid& grid, FakeGroupOptions opt = {});

// Runs body(rank) for rank 0 .. n-1, each on its own thread, and joins them
// all; then rethrows the first exception a body threw.
void run_ranks(int n, const std::function<void(int rank)>& body);

}  // namespace weft::testing
