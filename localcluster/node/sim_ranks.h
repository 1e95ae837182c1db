// SimulatedRanks: the ranks of pods that weft-node runs in simulation
// (`--simulate-pods`, as kwok does): no process starts; one thread of the
// agent serves, on every simulated pod's IP and metrics ports, what a
// weft-worker rank would: GET /metrics (the families the operator reads,
// contract/weft_metrics.h, with weft_rank_info naming the job uid, attempt,
// rank, pod index and local rank from the pod's own environment, and a step
// that advances every `step_seconds` from the pod's start) and GET /ready
// (200). Every rank runs at the same pace, so a gang of them is healthy:
// progress, the bucket-size tuner and straggler detection read them as they
// read real ranks.
//
// One listening socket per pod and port (127.<octet>.x.y:port), one epoll
// thread for all of them; connections are answered once and closed.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace weft::node {

// One simulated rank: who it says it is, where it listens.
struct SimulatedRank {
  std::string job_uid;
  int attempt = 0, rank = 0, node_rank = 0, local_rank = 0, world = 1;
  int port = 0;
};

// The ranks a pod would run: one per container port named "metrics" or
// "metrics-<L>" (the operator's pods: local rank L on the base port + L),
// with the identity from the container's plain env values (WEFT_JOB_UID,
// WEFT_ATTEMPT, RANK, NODE_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE). A pod with
// several ranks has rank NODE_RANK * LOCAL_WORLD_SIZE + L. Empty when the pod
// names no metrics port.
std::vector<SimulatedRank> simulated_ranks_of(const nlohmann::json& pod);

// The /metrics text of `r` after `steps` steps of `step_seconds` each.
std::string simulated_exposition(const SimulatedRank& r, long steps, double step_seconds);

class SimulatedRanks {
 public:
  explicit SimulatedRanks(double step_seconds = 0.5);
  ~SimulatedRanks();
  SimulatedRanks(const SimulatedRanks&) = delete;
  SimulatedRanks& operator=(const SimulatedRanks&) = delete;

  // Starts serving `ranks` for pod `uid` on `ip`; an error (a port taken)
  // serves none of them.
  std::string add(const std::string& uid, const std::string& ip, const std::vector<SimulatedRank>& ranks);
  // Stops serving pod `uid` (its sockets close: a scrape is refused, as of a
  // process that exited).
  void remove(const std::string& uid);
  size_t pods() const;

 private:
  struct Listener {
    SimulatedRank rank;
    std::chrono::steady_clock::time_point started;
    int fd = -1;
  };
  void serve();
  void answer(int conn, const Listener& l);

  double step_seconds_;
  int epoll_fd_ = -1, wake_fd_ = -1;
  mutable std::mutex mu_;
  std::map<int, Listener> listeners_;              // by listening fd
  std::map<std::string, std::vector<int>> by_pod_;  // pod uid -> listening fds
  std::jthread thread_;
};

}  // namespace weft::node
