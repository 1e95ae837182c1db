// LeaderElector: one active replica per Lease (coordination.k8s.io/v1), as
// client-go's leaderelection does it.
//
// Invariants:
//  - A replica only believes it leads while its last successful renewal is
//    younger than renew_deadline; past that it calls on_stopped_leading and
//    run() returns (the process should exit and start over).
//  - Expiry of another holder's lease is judged by the local clock from the
//    moment this replica last saw the record change, never by comparing the
//    holder's timestamps to our clock (clock skew between nodes).
//  - Every write carries the read resourceVersion: two candidates cannot both
//    take the lease; the loser gets Conflict.
//  - release() on a clean stop empties holderIdentity so a standby takes over
//    at its next retry instead of waiting for the lease to expire.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <stop_token>
#include <string>

#include "kube/kube_api.h"

namespace weft::kube {

struct LeaderElectionConfig {
  std::string ns = "default";
  std::string name = "weft-operator";
  std::string identity;                                   // unique per replica
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
};

class LeaderElector {
 public:
  LeaderElector(KubeApi& api, LeaderElectionConfig cfg);

  // Blocks: campaigns until leader, calls on_started_leading (which must
  // return promptly), renews until stop or loss, then calls
  // on_stopped_leading and releases the lease if it still holds it.
  void run(std::stop_token stop, const std::function<void()>& on_started_leading,
           const std::function<void()>& on_stopped_leading);

  bool is_leader() const { return leader_.load(); }
  long transitions_observed() const { return transitions_.load(); }

 private:
  bool try_acquire_or_renew();
  void release();

  KubeApi& api_;
  LeaderElectionConfig cfg_;
  std::atomic<bool> leader_{false};
  std::atomic<long> transitions_{0};
  Json observed_;                                     // last lease record seen
  std::chrono::steady_clock::time_point observed_at_{};
};

}  // namespace weft::kube
