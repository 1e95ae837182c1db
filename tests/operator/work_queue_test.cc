#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "kube/line_splitter.h"
#include "kube/work_queue.h"

namespace weft::kube {
namespace {
using namespace std::chrono_literals;

TEST(WorkQueue, DeduplicatesKeys) {
  WorkQueue q;
  q.add("a");
  q.add("a");
  q.add("b");
  EXPECT_EQ(q.depth(), 2u);
  EXPECT_EQ(*q.get(), "a");
  EXPECT_EQ(*q.get(), "b");
}

TEST(WorkQueue, KeyInFlightIsNotHandedOutTwiceAndComesBackAfterDone) {
  WorkQueue q;
  q.add("a");
  auto k = q.get();
  q.add("a");  // while processing: marked dirty, not queued
  EXPECT_EQ(q.depth(), 0u);
  q.done(*k);
  EXPECT_EQ(q.depth(), 1u);
  EXPECT_EQ(*q.get(), "a");
}

TEST(WorkQueue, RateLimitedBackoffDoublesPerKeyAndForgetResets) {
  WorkQueue q(5ms, 1000s);
  EXPECT_EQ(q.add_rate_limited("a").count(), 5);
  EXPECT_EQ(q.add_rate_limited("a").count(), 10);
  EXPECT_EQ(q.add_rate_limited("a").count(), 20);
  EXPECT_EQ(q.add_rate_limited("b").count(), 5);
  EXPECT_EQ(q.failures("a"), 3);
  q.forget("a");
  EXPECT_EQ(q.add_rate_limited("a").count(), 5);
}

TEST(WorkQueue, BackoffCapsAtMax) {
  WorkQueue q(5ms, 1000s);
  std::chrono::milliseconds last{};
  for (int i = 0; i < 60; ++i) last = q.add_rate_limited("a");
  EXPECT_EQ(last, std::chrono::milliseconds(1000s));
}

TEST(WorkQueue, AddAfterDeliversLater) {
  WorkQueue q;
  auto t0 = std::chrono::steady_clock::now();
  q.add_after("a", 50ms);
  EXPECT_EQ(q.depth(), 0u);
  EXPECT_EQ(*q.get(), "a");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 45ms);
}

TEST(WorkQueue, EarlierDelayReplacesLater) {
  WorkQueue q;
  q.add_after("a", 10s);
  q.add_after("a", 20ms);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(*q.get(), "a");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(WorkQueue, ShutdownWakesWorkers) {
  WorkQueue q;
  std::atomic<bool> got_null{false};
  std::thread t([&] { got_null = !q.get().has_value(); });
  std::this_thread::sleep_for(20ms);
  q.shutdown();
  t.join();
  EXPECT_TRUE(got_null);
}

TEST(WorkQueue, ManyWorkersNeverShareAKey) {
  WorkQueue q;
  std::atomic<int> in_flight{0}, max_in_flight{0}, processed{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w)
    workers.emplace_back([&] {
      while (auto k = q.get()) {
        int now = ++in_flight;
        int prev = max_in_flight.load();
        while (now > prev && !max_in_flight.compare_exchange_weak(prev, now)) {
        }
        std::this_thread::sleep_for(1ms);
        --in_flight;
        ++processed;
        q.done(*k);
      }
    });
  for (int i = 0; i < 200; ++i) q.add("same");
  std::this_thread::sleep_for(100ms);
  q.shutdown();
  for (auto& t : workers) t.join();
  EXPECT_EQ(max_in_flight.load(), 1);
  EXPECT_GE(processed.load(), 1);
}

TEST(LineSplitter, ChunkBoundariesAnywhere) {
  const std::string stream = "{\"a\":1}\n{\"b\":2}\n\n{\"c\":3}\n";
  for (size_t cut1 = 0; cut1 <= stream.size(); ++cut1)
    for (size_t cut2 = cut1; cut2 <= stream.size(); ++cut2) {
      LineSplitter s;
      std::vector<std::string> lines;
      auto on = [&](std::string_view l) {
        lines.emplace_back(l);
        return true;
      };
      s.feed(std::string_view(stream).substr(0, cut1), on);
      s.feed(std::string_view(stream).substr(cut1, cut2 - cut1), on);
      s.feed(std::string_view(stream).substr(cut2), on);
      ASSERT_EQ(lines, (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}", "{\"c\":3}"})) << cut1 << "," << cut2;
      EXPECT_TRUE(s.pending().empty());
    }
}

}  // namespace
}  // namespace weft::kube
