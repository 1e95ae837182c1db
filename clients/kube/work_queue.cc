#include "kube/work_queue.h"

#include <algorithm>
#include <cmath>

namespace weft::kube {

WorkQueue::WorkQueue(std::chrono::milliseconds base_delay, std::chrono::milliseconds max_delay)
    : base_(base_delay), max_(max_delay), delay_thread_([this] { delay_loop(); }) {}

WorkQueue::~WorkQueue() {
  shutdown();
  delay_thread_.join();
}

void WorkQueue::add_locked(const std::string& key) {
  if (shutting_down_ || dirty_.count(key)) return;
  dirty_.insert(key);
  if (processing_.count(key)) return;  // done() requeues it
  queue_.push_back(key);
  ready_cv_.notify_one();
}

void WorkQueue::add(const std::string& key) {
  std::lock_guard lock(mu_);
  add_locked(key);
}

void WorkQueue::add_after(const std::string& key, std::chrono::milliseconds delay) {
  if (delay.count() <= 0) return add(key);
  std::lock_guard lock(mu_);
  if (shutting_down_) return;
  auto at = Clock::now() + delay;
  // Keep only the earliest pending wake-up per key: a later one adds nothing.
  auto it = delayed_at_.find(key);
  if (it != delayed_at_.end()) {
    if (it->second <= at) return;
    auto range = delayed_.equal_range(it->second);
    for (auto d = range.first; d != range.second; ++d)
      if (d->second == key) {
        delayed_.erase(d);
        break;
      }
  }
  delayed_at_[key] = at;
  delayed_.emplace(at, key);
  delay_cv_.notify_one();
}

std::chrono::milliseconds WorkQueue::add_rate_limited(const std::string& key) {
  std::chrono::milliseconds delay;
  {
    std::lock_guard lock(mu_);
    int n = failures_[key]++;
    // base * 2^n, computed in double so large n saturates instead of overflowing.
    double ms = static_cast<double>(base_.count()) * std::pow(2.0, std::min(n, 40));
    delay = std::chrono::milliseconds(static_cast<long long>(std::min(ms, static_cast<double>(max_.count()))));
  }
  add_after(key, delay);
  return delay;
}

void WorkQueue::forget(const std::string& key) {
  std::lock_guard lock(mu_);
  failures_.erase(key);
}

int WorkQueue::failures(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

std::optional<std::string> WorkQueue::get() {
  std::unique_lock lock(mu_);
  ready_cv_.wait(lock, [&] { return shutting_down_ || !queue_.empty(); });
  if (shutting_down_) return std::nullopt;
  std::string key = queue_.front();
  queue_.pop_front();
  dirty_.erase(key);
  processing_.insert(key);
  return key;
}

void WorkQueue::done(const std::string& key) {
  std::lock_guard lock(mu_);
  processing_.erase(key);
  if (dirty_.count(key) && !shutting_down_) {
    queue_.push_back(key);
    ready_cv_.notify_one();
  }
}

void WorkQueue::shutdown() {
  std::lock_guard lock(mu_);
  shutting_down_ = true;
  ready_cv_.notify_all();
  delay_cv_.notify_all();
}

size_t WorkQueue::depth() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void WorkQueue::delay_loop() {
  std::unique_lock lock(mu_);
  while (!shutting_down_) {
    if (delayed_.empty()) {
      delay_cv_.wait(lock);
      continue;
    }
    auto next = delayed_.begin()->first;
    if (Clock::now() < next) {
      delay_cv_.wait_until(lock, next);
      continue;
    }
    std::string key = delayed_.begin()->second;
    delayed_.erase(delayed_.begin());
    delayed_at_.erase(key);
    add_locked(key);
  }
}

}  // namespace weft::kube
