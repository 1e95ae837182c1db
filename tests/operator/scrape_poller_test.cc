// The scrape poller (trainingjob/scrape_poller.h): what it scrapes of a
// watched job and when, on a fake scrape function and a fake clock
// (poll_due), and that its own threads scrape and enqueue (start).
#include "trainingjob/scrape_poller.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "canned_exposition.h"

namespace weft::tj {
namespace {
namespace cm = contract::metrics;
using weft::testing::rank_info_sample;
using weft::testing::rank_label;
using weft::testing::sample;

using namespace std::chrono_literals;

// Whose metrics a fake rank serves (contract::metrics::kRankInfo).
std::string rank_info(const std::string& uid, int attempt, int pod) {
  return rank_info_sample(uid, attempt, pod);
}

// The pod index of a fake host: "10.0.0.K" is pod K-1, "a", "b", ... pods 0, 1, ...
int pod_of(const std::string& host) {
  return host.rfind("10.0.0.", 0) == 0 ? std::stoi(host.substr(7)) - 1 : host[0] - 'a';
}

// Rank 0's exposition, as weft-worker labels it: step, loss and the tuner's families.
std::string exposition(int step) {
  const auto l = rank_label(0);
  return sample(cm::kStep, std::to_string(step), l) + sample(cm::kLoss, "2.5", l) +
         sample(cm::kTokensPerSecond, "1000", l) + sample(cm::kOverlapRatio, "0.5", l) +
         sample(cm::kBucketCapBytes, "26214400", l) + sample(cm::kStepSecondsSum, std::to_string(step * 0.1), l) +
         sample(cm::kStepSecondsCount, std::to_string(step), l);
}

// Answers per host: the step it serves, or an error when it is down.
struct FakeRanks {
  std::mutex mu;
  std::map<std::string, int> step;  // host -> weft_step
  std::set<std::string> down;
  std::vector<std::pair<std::string, long>> calls;  // host, timeout ms
  std::string uid = "uid-1";                         // the job whose ranks these are
  std::map<std::string, std::string> serves;         // host -> another process's exposition

  ScrapePoller::ScrapeFn fn() {
    return [this](const scrape::Endpoint& ep, std::chrono::milliseconds timeout) {
      std::lock_guard lock(mu);
      calls.emplace_back(ep.host, timeout.count());
      scrape::ScrapeResult r;
      if (down.count(ep.host)) {
        r.error = "http://" + ep.host + ":9400/metrics: connection refused";
        return r;
      }
      auto parsed = scrape::parse_text(serves.count(ep.host)
                                           ? serves[ep.host]
                                           : exposition(step[ep.host]) + rank_info(uid, 0, pod_of(ep.host)));
      r.metrics = parsed.exposition;
      return r;
    };
  }
  std::vector<std::string> hosts() {
    std::lock_guard lock(mu);
    std::vector<std::string> out;
    for (auto& c : calls) out.push_back(c.first);
    calls.clear();
    return out;
  }
};

struct FakeClock {
  TimePoint t = TimePoint{} + 1000h;
  std::function<TimePoint()> fn() {
    return [this] { return t; };
  }
};

ScrapeTarget target(std::vector<std::pair<int, std::string>> ranks, bool progress, bool tuning) {
  return ScrapeTarget{"uid-1", 0, 9400, std::move(ranks), progress, tuning};
}

PollerOptions options() {
  PollerOptions o;
  o.progress_every = 10s;
  o.tuning_every = 2s;
  o.rank_concurrency = 1;  // one rank after another: the order of scrapes is part of what is checked
  return o;
}

TEST(ScrapePoller, ProgressScrapesRankZeroOncePerInterval) {
  FakeRanks ranks;
  FakeClock clock;
  ranks.step["10.0.0.1"] = 42;
  ScrapePoller poller(options(), ranks.fn(), clock.fn());
  std::vector<std::string> notified;
  poller.set_notify([&](const std::string& key) { notified.push_back(key); });
  EXPECT_FALSE(poller.latest("ns/job"));

  poller.watch("ns/job", target({{0, "10.0.0.1"}, {1, "10.0.0.2"}}, true, false));
  poller.poll_due();  // a new job is due at once
  EXPECT_EQ(ranks.hosts(), std::vector<std::string>{"10.0.0.1"});
  auto f = poller.latest("ns/job");
  ASSERT_TRUE(f && f->progress);
  EXPECT_EQ(f->progress->progress.step, 42);
  EXPECT_EQ(f->progress->at, clock.t);
  EXPECT_FALSE(f->round);
  EXPECT_EQ(notified, std::vector<std::string>{"ns/job"});

  clock.t += 9s;
  poller.poll_due();
  EXPECT_TRUE(ranks.hosts().empty()) << "scraped again before --progress-seconds";
  clock.t += 1s;
  ranks.step["10.0.0.1"] = 50;
  poller.poll_due();
  EXPECT_EQ(ranks.hosts().size(), 1u);
  EXPECT_EQ(poller.latest("ns/job")->progress->progress.step, 50);

  // A failed scrape keeps the last figures and tells no one.
  ranks.down.insert("10.0.0.1");
  clock.t += 10s;
  poller.poll_due();
  EXPECT_EQ(ranks.hosts().size(), 1u);
  EXPECT_EQ(poller.latest("ns/job")->progress->progress.step, 50);
  EXPECT_EQ(notified.size(), 2u);
}

TEST(ScrapePoller, ProgressUsesTheShortTimeoutAndTuningTheLongOne) {
  FakeRanks ranks;
  FakeClock clock;
  ScrapePoller poller(options(), ranks.fn(), clock.fn());
  poller.watch("ns/job", target({{0, "10.0.0.1"}}, true, false));
  poller.poll_due();
  ASSERT_EQ(ranks.calls.size(), 1u);
  EXPECT_EQ(ranks.calls[0].second, 1000);
  ranks.calls.clear();
  // Both due: one scrape of rank 0 serves both.
  clock.t += 10s;
  poller.watch("ns/job", target({{0, "10.0.0.1"}}, true, true));
  poller.poll_due();
  ASSERT_EQ(ranks.calls.size(), 1u);
  EXPECT_EQ(ranks.calls[0].second, 3000);
  auto f = poller.latest("ns/job");
  ASSERT_TRUE(f && f->progress && f->round);
  EXPECT_EQ(f->progress->at, clock.t);
}

TEST(ScrapePoller, TuningRoundsEveryRankEveryPollAndVoidsARoundAfterAMissingSample) {
  FakeRanks ranks;
  FakeClock clock;
  ranks.step = {{"a", 5}, {"b", 6}, {"c", 7}};
  ScrapePoller poller(options(), ranks.fn(), clock.fn());
  const auto t = target({{0, "a"}, {1, "b"}, {2, "c"}}, false, true);
  poller.watch("ns/job", t);
  poller.poll_due();
  EXPECT_EQ(ranks.hosts(), (std::vector<std::string>{"a", "b", "c"}));
  auto f = poller.latest("ns/job");
  ASSERT_TRUE(f && f->round);
  EXPECT_FALSE(f->progress);
  EXPECT_TRUE(f->round->target.same_ranks(t));
  ASSERT_EQ(f->round->ranks.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(f->round->ranks[r].rank, r);
    ASSERT_TRUE(f->round->ranks[r].sample);
    EXPECT_EQ(f->round->ranks[r].sample->step, 5 + r);
  }
  const uint64_t first = f->round->seq;

  clock.t += 1s;
  poller.poll_due();
  EXPECT_TRUE(ranks.hosts().empty());
  clock.t += 1s;
  ranks.down.insert("b");
  poller.poll_due();
  // Rank 1 fails: rank 2 is not scraped.
  EXPECT_EQ(ranks.hosts(), (std::vector<std::string>{"a", "b"}));
  f = poller.latest("ns/job");
  EXPECT_GT(f->round->seq, first);
  EXPECT_TRUE(f->round->ranks[0].sample);
  EXPECT_FALSE(f->round->ranks[1].sample);
  EXPECT_NE(f->round->ranks[1].error.find("connection refused"), std::string::npos);
  EXPECT_FALSE(f->round->ranks[2].sample);
  EXPECT_EQ(f->round->ranks[2].error, "not scraped");

  // Rank 0 is scraped even when an earlier rank voided the round.
  poller.watch("ns/job", target({{1, "b"}, {0, "a"}, {2, "c"}}, false, true));
  clock.t += 2s;
  poller.poll_due();
  EXPECT_EQ(ranks.hosts(), (std::vector<std::string>{"b", "a", "c"}));
}

TEST(ScrapePoller, PausedJobsKeepFiguresAndForgottenOrReplacedJobsLoseThem) {
  FakeRanks ranks;
  FakeClock clock;
  ScrapePoller poller(options(), ranks.fn(), clock.fn());
  poller.pause("ns/unknown");  // no-op
  EXPECT_FALSE(poller.latest("ns/unknown"));

  poller.watch("ns/job", target({{0, "a"}}, true, true));
  poller.poll_due();
  EXPECT_EQ(ranks.hosts().size(), 1u);
  poller.pause("ns/job");
  clock.t += 60s;
  poller.poll_due();
  EXPECT_TRUE(ranks.hosts().empty());
  EXPECT_TRUE(poller.latest("ns/job")->progress);

  // The same name, another job: nothing of the old one.
  auto other = target({{0, "a"}}, true, false);
  other.uid = "uid-2";
  ranks.uid = "uid-2";
  poller.watch("ns/job", other);
  auto f = poller.latest("ns/job");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->uid, "uid-2");
  EXPECT_FALSE(f->progress);
  EXPECT_FALSE(f->round);
  poller.poll_due();
  EXPECT_EQ(ranks.hosts().size(), 1u);

  poller.forget("ns/job");
  EXPECT_FALSE(poller.latest("ns/job"));
  clock.t += 60s;
  poller.poll_due();
  EXPECT_TRUE(ranks.hosts().empty());
}

// Another process on a rank's port (or a previous attempt, or the wrong pod)
// is never read as the job's: the scrape fails, the figures keep what the
// job's own ranks said, and `foreign` says what answered until the port is
// the rank's again.
TEST(ScrapePoller, MetricsThatAreNotTheJobsRankAreNeverUsed) {
  FakeRanks ranks;
  FakeClock clock;
  ScrapePoller poller(options(), ranks.fn(), clock.fn());
  ranks.step["10.0.0.1"] = 10;
  poller.watch("ns/job", target({{0, "10.0.0.1"}}, true, false));
  poller.poll_due();
  ASSERT_TRUE(poller.latest("ns/job")->progress);
  EXPECT_EQ(poller.latest("ns/job")->progress->progress.step, 10);
  EXPECT_FALSE(poller.latest("ns/job")->foreign);

  const std::vector<std::pair<std::string, std::string>> impostors = {
      {"another process", exposition(281)},                                 // no weft_rank_info
      {"another job", exposition(281) + rank_info("uid-9", 0, 0)},           // a namesake's rank
      {"an earlier attempt", exposition(281) + rank_info("uid-1", 3, 0)},    // attempt 3, not 0
      {"another pod", exposition(281) + rank_info("uid-1", 0, 4)}};          // pod 4's rank
  for (const auto& [who, text] : impostors) {
    ranks.serves["10.0.0.1"] = text;
    clock.t += 10s;
    poller.poll_due();
    auto f = poller.latest("ns/job");
    EXPECT_EQ(f->progress->progress.step, 10) << who << "'s step 281 was read as the job's";
    ASSERT_TRUE(f->foreign) << who;
    EXPECT_NE(f->foreign->find("10.0.0.1:9400"), std::string::npos) << *f->foreign;
  }
  ranks.serves.clear();
  ranks.step["10.0.0.1"] = 12;
  clock.t += 10s;
  poller.poll_due();
  EXPECT_EQ(poller.latest("ns/job")->progress->progress.step, 12);
  EXPECT_FALSE(poller.latest("ns/job")->foreign) << "cleared once the port is the rank's again";
}

TEST(Progress, NotThisRankNamesWhatAnswered) {
  auto m = [](const std::string& t) { return scrape::parse_text(t).exposition; };
  EXPECT_EQ(not_this_rank(m(rank_info("u", 2, 1)), "u", 2, 1), "");
  EXPECT_NE(not_this_rank(m(sample(cm::kStep, "3")), "u", 2, 1).find(std::string("no ") + cm::kRankInfo.name), std::string::npos);
  EXPECT_NE(not_this_rank(m(rank_info("v", 2, 1)), "u", 2, 1).find("job uid v"), std::string::npos);
  EXPECT_NE(not_this_rank(m(rank_info("", 0, 0)), "u", 0, 0).find("no TrainingJob's rank"), std::string::npos);
  EXPECT_NE(not_this_rank(m(rank_info("u", 1, 1)), "u", 2, 1).find("attempt 1"), std::string::npos);
}

TEST(ScrapePoller, NothingToScrapeWithoutRanksAPortOrAnInterval) {
  FakeRanks ranks;
  FakeClock clock;
  PollerOptions off = options();
  off.progress_every = 0s;
  ScrapePoller poller(off, ranks.fn(), clock.fn());
  poller.watch("ns/off", target({{0, "a"}}, true, false));
  poller.watch("ns/none", target({}, true, true));
  auto no_port = target({{0, "a"}}, false, true);
  no_port.port = 0;
  poller.watch("ns/noport", no_port);
  poller.poll_due();
  EXPECT_TRUE(ranks.hosts().empty());
}

TEST(ScrapePoller, ItsThreadsScrapeAndEnqueueUntilStopped) {
  FakeRanks ranks;
  PollerOptions o = options();
  o.tuning_every = 20ms;
  ScrapePoller poller(o, ranks.fn());
  std::mutex mu;
  std::condition_variable cv;
  int notified = 0;
  poller.set_notify([&](const std::string& key) {
    EXPECT_EQ(key, "ns/job");
    std::lock_guard lock(mu);
    ++notified;
    cv.notify_all();
  });
  poller.start();
  poller.watch("ns/job", target({{0, "a"}, {1, "b"}}, true, true));
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return notified >= 3; })) << notified << " passes";
  }
  poller.stop();
  ranks.hosts();
  const int after = notified;
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(notified, after);
  EXPECT_TRUE(ranks.hosts().empty());
  auto f = poller.latest("ns/job");
  ASSERT_TRUE(f && f->progress && f->round);
}

// A pass over every rank scrapes up to rank_concurrency ranks at once and
// keeps the ranks' order in what it produces; the tuner's round still ends
// at the wave with the first missing sample.
TEST(ScrapePoller, EveryRankPassesScrapeRanksConcurrentlyInOrder) {
  constexpr int kRanks = 40, kConcurrency = 8;
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0, most = 0, calls = 0;
  std::set<std::string> down;
  auto fn = [&](const scrape::Endpoint& ep, std::chrono::milliseconds) {
    const int pod = pod_of(ep.host);
    {
      // Each scrape waits (a bounded while) for a second one to be in flight,
      // so that a poller that scraped one at a time is seen doing so.
      std::unique_lock lock(mu);
      ++calls;
      most = std::max(most, ++in_flight);
      cv.notify_all();
      cv.wait_for(lock, 2s, [&] { return most >= 2; });
    }
    scrape::ScrapeResult r;
    if (down.count(ep.host)) {
      r.error = "connection refused";
    } else {
      const auto l = rank_label(pod);
      r.metrics = scrape::parse_text(exposition(100 + pod) + sample(cm::kComputeSeconds, std::to_string(10 + pod), l) +
                                     sample(cm::kWaitSeconds, "1", l) + rank_info("uid-1", 0, pod))
                      .exposition;
    }
    std::lock_guard lock(mu);
    --in_flight;
    return r;
  };
  FakeClock clock;
  PollerOptions o = options();
  o.rank_concurrency = kConcurrency;
  size_t observed_scrapes = 0;
  int observed_passes = 0;
  o.on_pass = [&](bool every_rank, size_t scraped, double seconds) {
    EXPECT_TRUE(every_rank);
    EXPECT_GE(seconds, 0);
    observed_scrapes += scraped;
    ++observed_passes;
  };
  ScrapePoller poller(o, fn, clock.fn());
  std::vector<std::pair<int, std::string>> ranks;
  for (int r = 0; r < kRanks; ++r) ranks.emplace_back(r, "10.0.0." + std::to_string(r + 1));
  ScrapeTarget t = target(ranks, false, false);
  t.stragglers = true;
  poller.watch("ns/job", t);
  poller.poll_due();
  auto f = poller.latest("ns/job");
  ASSERT_TRUE(f);
  ASSERT_EQ(f->pace.size(), 1u);
  ASSERT_EQ(f->pace.back().ranks.size(), static_cast<size_t>(kRanks));
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(f->pace.back().ranks[r].rank, r);
    EXPECT_EQ(f->pace.back().ranks[r].step, 100 + r);
  }
  EXPECT_EQ(calls, kRanks);
  EXPECT_GT(most, 1) << "one rank at a time";
  EXPECT_LE(most, kConcurrency);
  EXPECT_EQ(observed_passes, 1);
  EXPECT_EQ(observed_scrapes, static_cast<size_t>(kRanks));

  // The tuner's round: rank 3 is down; the first wave (ranks 0-7) is scraped,
  // nothing after it, and the ranks after rank 3 are not used.
  calls = 0;
  down.insert("10.0.0.4");
  ScrapeTarget tuning = target(ranks, false, true);
  poller.watch("ns/job", tuning);
  clock.t += 10s;
  poller.poll_due();
  f = poller.latest("ns/job");
  ASSERT_TRUE(f && f->round);
  ASSERT_EQ(f->round->ranks.size(), static_cast<size_t>(kRanks));
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(f->round->ranks[r].sample) << r;
  EXPECT_EQ(f->round->ranks[3].error, "connection refused");
  for (int r = 4; r < kRanks; ++r) {
    EXPECT_FALSE(f->round->ranks[r].sample) << r;
    EXPECT_EQ(f->round->ranks[r].error, "not scraped") << r;
  }
  EXPECT_EQ(calls, kConcurrency);
}

}  // namespace
}  // namespace weft::tj
