// weft comm: the Gloo (CPU) Communicator. Each instance owns one Gloo context
// over the TCP transport for its group and one communication thread that runs
// the group's collectives in FIFO order, so the caller keeps computing.
//
// Invariants: collectives start on the comm thread in issue order; each runs
// under the CommContext deadline (Gloo's own timeouts are set to it and the
// watchdog backs them up); a failed collective ends the process with exit code
// 3 (FailurePolicy::Exit) or poisons the communicator so every later Work
// throws (FailurePolicy::Throw). Group creation is collective: every member
// calls create() with the same name and member list.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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
                                                  int global_rank);
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

 private:
  GlooCommunicator(CommContext& ctx, std::string name, std::vector<int> members, int rank,
                   std::shared_ptr<gloo::Context> context);

  // One queued collective. `run` gets the op's tag and deadline budget and
  // returns the global rank of a peer that failed, via exception.
  struct Op {
    OpKind kind;
    std::string label;
    uint64_t bytes;
    std::function<void(uint32_t tag)> run;
    std::shared_ptr<GlooWork> work;
  };
  WorkPtr enqueue(OpKind kind, const std::string& label, uint64_t bytes,
                  std::function<void(uint32_t tag)> run);
  void comm_loop();
  void ring_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op,
                           const std::vector<int64_t>& counts, uint32_t tag);

  CommContext& ctx_;
  const std::string name_;
  const std::vector<int> members_;
  const int rank_;
  std::shared_ptr<gloo::Context> context_;
  StatsRecorder stats_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  bool stop_ = false;
  std::string poisoned_;  // first failure under FailurePolicy::Throw
  uint32_t next_tag_ = 0;
  int failed_peer_ = -1;  // group rank the ring saw fail, for the message
  std::thread thread_;
};

}  // namespace weft::comm
