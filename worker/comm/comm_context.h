// weft comm: CommContext, the per-process state every communicator shares —
// the collective deadline, the current training step (for failure messages),
// the failure policy, and the watchdog thread that watches in-flight
// collectives. One per process, created in main and passed explicitly (no
// global). Invariant: under FailurePolicy::Exit no collective outlives its
// deadline by more than the watchdog grace; the process exits with code 3.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "comm/communicator.h"
#include "comm/network_model.h"

namespace weft::comm {

enum class FailurePolicy : uint8_t {
  Exit,   // log to stderr and std::_Exit(3): the production behaviour
  Throw,  // Work::wait() throws CommError (tests of misuse; the watchdog still exits)
};

// What went wrong, for the one-line failure message.
struct CommFailure {
  bool timeout = false;  // deadline missed (else: peer lost / transport error)
  OpKind op = OpKind::Barrier;
  std::string group;
  std::string label;     // caller's name for the data, e.g. "bucket 3"
  int peer = -1;         // global rank of the peer if known
  std::string detail;    // backend message
};

class CommContext {
 public:
  using Clock = std::chrono::steady_clock;

  explicit CommContext(std::chrono::milliseconds timeout,
                       FailurePolicy policy = FailurePolicy::Exit,
                       std::chrono::milliseconds watchdog_grace = std::chrono::milliseconds(2000));
  ~CommContext();
  CommContext(const CommContext&) = delete;
  CommContext& operator=(const CommContext&) = delete;

  std::chrono::milliseconds timeout() const { return timeout_; }
  FailurePolicy policy() const { return policy_; }
  // The emulated network (comm.simulate) the Gloo groups of this process
  // apply; off unless set before the groups are created.
  const NetworkModel& network() const { return network_; }
  void set_network(const NetworkModel& n) { network_ = n; }
  int global_rank() const { return global_rank_; }
  void set_global_rank(int r) { global_rank_ = r; }

  // The trainer sets the step it is in; failure messages name it.
  void set_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  int64_t step() const { return step_.load(std::memory_order_relaxed); }

  // The watchdog: a backend registers each collective when it starts. `poll`
  // (optional) returns true once the collective is done (NCCL events) and is
  // called from the watchdog thread; `abort` (optional) is called before the
  // process exits (ncclCommAbort). end() unregisters.
  struct Watch {
    OpKind op = OpKind::Barrier;
    std::string group;
    std::string label;
    Clock::time_point deadline;
    std::function<bool()> poll;
    std::function<void()> abort;
  };
  uint64_t watch(Watch w);
  void unwatch(uint64_t id);

  // Formats "weft: collective timeout|peer lost: step S, op OP, group G[,
  // LABEL][, peer R]: DETAIL". Under FailurePolicy::Exit writes it to stderr
  // and calls std::_Exit(3) (no destructors: a peer may be blocked forever);
  // under Throw returns the message for the caller to throw.
  std::string fail(const CommFailure& f);
  std::string describe(const CommFailure& f) const;

 private:
  void watchdog_loop();

  const std::chrono::milliseconds timeout_;
  const FailurePolicy policy_;
  NetworkModel network_;
  const std::chrono::milliseconds grace_;
  int global_rank_ = 0;
  std::atomic<int64_t> step_{-1};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Watch> watches_;
  std::thread watchdog_;
};

}  // namespace weft::comm
