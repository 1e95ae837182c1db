// WorkQueue: the de-duplicating, rate-limited queue between watch events and
// reconcile workers (client-go's workqueue semantics).
//
// Invariants:
//  - A key is in the queue at most once, however often it is added.
//  - A key is never handed to two workers at once: adding a key that is being
//    processed marks it dirty, and done() puts it back.
//  - add_rate_limited() delays a key by base * 2^failures (capped), per key;
//    forget() resets the count after a success.
//  - After shutdown(), get() drains nothing and returns false.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

namespace weft::kube {

class WorkQueue {
 public:
  using Clock = std::chrono::steady_clock;
  explicit WorkQueue(std::chrono::milliseconds base_delay = std::chrono::milliseconds(5),
                     std::chrono::milliseconds max_delay = std::chrono::seconds(1000));
  ~WorkQueue();

  void add(const std::string& key);
  void add_after(const std::string& key, std::chrono::milliseconds delay);
  // Requeue after the key's next backoff; returns the delay used.
  std::chrono::milliseconds add_rate_limited(const std::string& key);
  void forget(const std::string& key);
  int failures(const std::string& key) const;

  // Blocks until a key is ready or the queue shuts down (nullopt).
  std::optional<std::string> get();
  void done(const std::string& key);
  void shutdown();

  size_t depth() const;  // ready keys (not delayed, not in flight)

 private:
  void add_locked(const std::string& key);
  void delay_loop();

  mutable std::mutex mu_;
  std::condition_variable ready_cv_;
  std::condition_variable delay_cv_;
  std::deque<std::string> queue_;
  std::set<std::string> dirty_;
  std::set<std::string> processing_;
  std::multimap<Clock::time_point, std::string> delayed_;
  std::map<std::string, Clock::time_point> delayed_at_;  // earliest pending delay per key
  std::map<std::string, int> failures_;
  std::chrono::milliseconds base_, max_;
  bool shutting_down_ = false;
  std::thread delay_thread_;
};

}  // namespace weft::kube
