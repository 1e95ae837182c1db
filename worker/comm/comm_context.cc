#include "comm/comm_context.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace weft::comm {

CommContext::CommContext(std::chrono::milliseconds timeout, FailurePolicy policy,
                         std::chrono::milliseconds watchdog_grace)
    : timeout_(timeout), policy_(policy), grace_(watchdog_grace) {
  if (timeout.count() <= 0) throw CommError("comm.timeout_s must be positive");
  watchdog_ = std::thread([this] { watchdog_loop(); });
}

CommContext::~CommContext() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
}

uint64_t CommContext::watch(Watch w) {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t id = next_id_++;
  watches_.emplace(id, std::move(w));
  return id;
}

void CommContext::unwatch(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  watches_.erase(id);
}

std::string CommContext::describe(const CommFailure& f) const {
  std::string m = std::string("weft: ") + (f.timeout ? "collective timeout" : "peer lost") +
                  ": rank " + std::to_string(global_rank_) + ", step " + std::to_string(step()) +
                  ", op " + op_name(f.op) + ", group " + f.group;
  if (!f.label.empty()) m += ", " + f.label;
  if (f.peer >= 0) m += ", peer " + std::to_string(f.peer);
  if (!f.detail.empty()) m += ": " + f.detail;
  return m;
}

std::string CommContext::fail(const CommFailure& f) {
  std::string msg = describe(f);
  if (policy_ == FailurePolicy::Throw) return msg;
  std::fprintf(stderr, "%s\n", msg.c_str());
  std::fflush(stderr);
  // A blocked peer or a wedged transport thread could make any orderly
  // shutdown hang, so skip destructors: the operator restarts the gang.
  std::_Exit(kExitPeerLost);
}

void CommContext::watchdog_loop() {
  // Polls every 50 ms: cheap, and far below any sensible deadline.
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(50));
    if (stop_) break;
    auto now = Clock::now();
    std::vector<uint64_t> done;
    for (auto& [id, w] : watches_) {
      if (w.poll && w.poll()) {
        done.push_back(id);
        continue;
      }
      // Gloo enforces the deadline itself; the grace lets its own, more
      // precise error (naming the peer) win. NCCL relies on this check alone
      // (grace is added there too, it is a backstop either way).
      if (now > w.deadline + grace_) {
        CommFailure f;
        f.timeout = true;
        f.op = w.op;
        f.group = w.group;
        f.label = w.label;
        f.detail = "deadline of " + std::to_string(timeout_.count()) + " ms exceeded";
        std::string msg = describe(f);
        std::fprintf(stderr, "%s\n", msg.c_str());
        std::fflush(stderr);
        for (auto& [id2, w2] : watches_)
          if (w2.abort) w2.abort();
        std::_Exit(kExitPeerLost);
      }
    }
    for (uint64_t id : done) watches_.erase(id);
  }
}

}  // namespace weft::comm
