// weft comm: the Gloo (CPU) Communicator. Each instance owns one or more
// lanes for its group; a lane is a Gloo context over the TCP transport (its
// own connections) plus a communication thread that runs the lane's
// collectives in FIFO order, so the caller keeps computing and independent
// collectives of one group run at once.
//
// Lanes (comm.lanes = N, GroupOptions::lanes): with N == 1 (and always for a
// one-rank group) there is a single lane and collectives run strictly in
// issue order. With N >= 2 there are N bulk lanes plus one express lane:
//  - a collective whose group-wide payload is at most kExpressLaneBytes (the
//    step agreement, the loss, barriers) goes to the express lane, so it never
//    queues behind a large gradient bucket;
//  - every other collective goes to bulk lane (k mod N), k counting the bulk
//    collectives in issue order.
// The choice depends only on issue order and on sizes every member agrees on,
// so all ranks put the i-th collective on the same lane, and each lane sees
// the same sequence on every rank: the per-lane FIFO is what matches them up.
//
// Invariants: collectives start on their lane's thread in issue order; a
// collective whose buffers overlap those of an earlier collective still in
// flight on another lane waits for it (read-after-write order is kept as with
// one FIFO), and a barrier waits for every earlier collective. Completion
// order across lanes is not issue order: wait on each Work you need. Each
// collective runs under the CommContext deadline (Gloo's own timeouts are set
// to it and the watchdog backs them up); a failed collective ends the process
// with exit code 3 (FailurePolicy::Exit) or poisons the communicator so every
// later Work throws (FailurePolicy::Throw). Group creation is collective:
// every member calls create() with the same name, member list and lanes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/comm_context.h"
#include "comm/communicator.h"
#include "comm/tcp_store.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace weft::comm {

// A TCP transport device bound to `bind_addr` (an IP or hostname peers can
// reach). One per process, shared by all its Gloo communicators.
std::shared_ptr<gloo::transport::Device> make_gloo_device(const std::string& bind_addr);

class GlooWork;

class GlooCommunicator : public Communicator {
 public:
  // Connects the group through `store` (keys under "gloo/<name>/<members>/").
  // `members` are global ranks in group order and must contain global_rank.
  static std::shared_ptr<GlooCommunicator> create(CommContext& ctx, TcpStore* store,
                                                  std::shared_ptr<gloo::transport::Device> device,
                                                  std::string name, std::vector<int> members,
                                                  int global_rank, int lanes = 1);
  // Collectives of at most this many bytes (group-wide payload) take the
  // express lane when there are lanes >= 2. The per-step control traffic is a
  // few bytes; above a few KiB collectives gain more from running two at a
  // time on the bulk lanes than from skipping the queue.
  static constexpr uint64_t kExpressLaneBytes = 16 << 10;
  // Contexts/threads this communicator runs (1, or lanes + 1).
  int lane_count() const { return static_cast<int>(lanes_.size()); }
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const std::string& name() const override { return name_; }
  const std::vector<int>& members() const override { return members_; }

  WorkPtr all_reduce(const Tensor& data, ReduceOp op, const std::string& label = "") override;
  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op,
                         const std::vector<int64_t>& counts = {},
                         const std::string& label = "") override;
  WorkPtr all_gather(const Tensor& input, const Tensor& output,
                     const std::vector<int64_t>& counts = {},
                     const std::string& label = "") override;
  WorkPtr all_to_all(const Tensor& input, const Tensor& output,
                     const std::vector<int64_t>& send_counts = {},
                     const std::vector<int64_t>& recv_counts = {},
                     const std::string& label = "") override;
  WorkPtr broadcast(const Tensor& data, int root, const std::string& label = "") override;
  WorkPtr barrier(const std::string& label = "") override;

  CommStats stats() const override { return stats_.snapshot(); }

  // Work to run on the lane's thread around one collective
  // (comm/staged_communicator.h: a device buffer's copy to host memory before,
  // the copy back after). `before` runs when the collective reaches the head
  // of its lane, ahead of its start time; `after` once it succeeded, before
  // its Work completes. A hook that throws fails the collective.
  struct Hooks {
    std::function<void()> before, after;
  };
  // Issues the one collective `issue` calls on this communicator (from this
  // thread) with `hooks` attached.
  WorkPtr with_hooks(Hooks hooks, const std::function<WorkPtr()>& issue);

 private:
  struct Lane;
  // Byte ranges [first, second) of the memory a collective reads or writes.
  using Extents = std::vector<std::pair<uintptr_t, uintptr_t>>;
  // What a collective needs to know where it runs: its lane's context, and
  // where to record the group rank of a peer that failed (for the message).
  struct RunCtx {
    std::shared_ptr<gloo::Context> context;
    int* failed_peer;
    std::vector<char>* scratch;  // the lane's, kept between collectives (grow-only)
  };
  // One queued collective. `run` gets its lane and tag; failures throw.
  struct Op {
    OpKind kind;
    std::string label;
    uint64_t bytes;
    uint32_t tag;
    std::function<void(const RunCtx&, uint32_t tag)> run;
    std::shared_ptr<GlooWork> work;
    std::vector<std::shared_ptr<GlooWork>> after;  // in flight on other lanes, overlapping
    Hooks hooks;
  };
  struct Lane {
    std::shared_ptr<gloo::Context> context;
    std::condition_variable cv;
    std::deque<Op> queue;
    int failed_peer = -1;  // only touched by the lane's thread
    std::vector<char> scratch;  // likewise: the ring reduce-scatter's staging
    std::thread thread;
  };
  // A collective issued and not yet known to be complete, for the overlap check.
  struct InFlight {
    int lane;
    Extents extents;
    std::shared_ptr<GlooWork> work;
  };

  GlooCommunicator(CommContext& ctx, std::string name, std::vector<int> members, int rank,
                   std::vector<std::shared_ptr<gloo::Context>> contexts);

  // `group_bytes`: the payload size every member agrees on, which picks the
  // lane (UINT64_MAX when members may disagree: always a bulk lane).
  WorkPtr enqueue(OpKind kind, const std::string& label, uint64_t bytes, uint64_t group_bytes,
                  Extents extents, std::function<void(const RunCtx&, uint32_t tag)> run);
  int pick_lane(OpKind kind, uint64_t group_bytes);
  void comm_loop(Lane& lane);
  // The one-line failure of `op` (CommContext::fail: exits under FailurePolicy::Exit).
  std::string fail(const Op& op, const Lane& lane, const std::exception& e);
  // comm.simulate: holds the lane until the modelled network carried `op`. The
  // bulk lanes of a group share one modelled link (their transfer terms
  // queue); the express lane's small collectives pay only their own cost.
  void simulate_network(const Op& op, bool express);
  void ring_reduce_scatter(const RunCtx& rc, const Tensor& input, const Tensor& output, ReduceOp op,
                           const std::vector<int64_t>& counts, uint32_t tag);

  CommContext& ctx_;
  const std::string name_;
  const std::vector<int> members_;
  const int rank_;
  StatsRecorder stats_;

  std::mutex mu_;
  std::vector<std::unique_ptr<Lane>> lanes_;  // [0] the express lane when there are several
  std::vector<InFlight> in_flight_;
  bool stop_ = false;
  std::string poisoned_;  // first failure under FailurePolicy::Throw
  uint32_t next_tag_ = 0;
  uint64_t next_bulk_ = 0;
  std::chrono::steady_clock::time_point link_free_{};  // comm.simulate's shared link
};

}  // namespace weft::comm
