// ScrapePoller: reads the running jobs' ranks' /metrics on threads of its
// own, so that a reconcile never waits on a rank. The reconcile tells it what
// to scrape (watch: the current attempt's running ranks, their pod IPs, the
// metrics port, and whether status.progress and the bucket-size tuner want
// figures), reads the latest figures (latest), and has it forget a job that
// finished or was deleted (forget). A job whose ranks do not all run is
// watched with an empty target: nothing is scraped, its schedule is kept.
//
// Cadence per job, what the reconcile scraped before:
//  - progress: rank 0 every PollerOptions::progress_every (--progress-seconds),
//    1 s timeout; a failed scrape keeps the last figures;
//  - tuning: while the tuner needs samples, every rank every
//    PollerOptions::tuning_every (TunerOptions::poll), 3 s timeout a rank;
//    after the first rank without a sample the round is void and only rank 0
//    (whose cap an auto-sized job starts from) is still scraped;
//  - stragglers: with spec.stragglers, every rank every
//    PollerOptions::stragglers_every into a window of rounds (the pace of each
//    rank: steps, compute and wait seconds), kept while the ranks stay the
//    same; a round with a rank missing is dropped.
// A pass that reads every rank scrapes up to PollerOptions::rank_concurrency
// of them at once, so that it costs its slowest wave rather than the sum of
// every rank's time (one rank running into the 3 s timeout would otherwise
// overrun the 2 s straggler interval by itself; 1 024 healthy simulated ranks
// took 0.2-0.3 s either way: docs/benchmarks/operator-scale.md); the tuner's
// round goes in waves of that many, so a missing sample still ends it after
// at most one wave. Every pass's wall time goes to the on_pass hook (the
// operator's weft_operator_scrape_pass_seconds).
// A newly watched job is due at once. After a pass that produced figures the
// notify hook gets the job's key (the controller enqueues it), so the figures
// reach status without waiting for a requeue.
//
// Tests inject the scrape function and the clock, and call poll_due() on
// their own thread instead of start().
// defines: ScrapeTarget, ScrapedProgress, ScrapedRound, ScrapedFigures, PollerOptions,
// ScrapePoller.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "scrape/endpoint.h"
#include "trainingjob/clock.h"
#include "trainingjob/progress.h"
#include "trainingjob/straggler_policy.h"
#include "tuner/bucket_tuner.h"

namespace weft::tj {

// What to scrape of one job, as its last reconcile saw it.
struct ScrapeTarget {
  std::string uid;  // the job's; another uid under the same key starts afresh
  int attempt = 0;  // status.attempt of the ranks below
  int port = 0;     // the job's metrics port
  std::vector<std::pair<int, std::string>> ranks;  // (rank, pod IP) of the attempt's running pods
  bool progress = false;                           // rank 0 for status.progress
  bool tuning = false;                             // every rank for the tuner
  bool stragglers = false;                         // every rank's pace for the straggler policy
  bool operator==(const ScrapeTarget&) const = default;
  // Whether two targets name the same ranks of the same attempt.
  bool same_ranks(const ScrapeTarget& o) const {
    return uid == o.uid && attempt == o.attempt && port == o.port && ranks == o.ranks;
  }
};

struct ScrapedProgress {
  Progress progress;
  TimePoint at;  // when rank 0 was scraped
};

// One tuning round: an observation per rank of `target`, in its order.
struct ScrapedRound {
  ScrapeTarget target;
  std::vector<tuner::RankObservation> ranks;
  TimePoint at;
  uint64_t seq = 0;  // increases with every round of any job: a reader takes each round once
};

struct ScrapedFigures {
  std::string uid;
  std::optional<ScrapedProgress> progress;  // the latest successful scrape of rank 0
  std::optional<ScrapedRound> round;        // the latest tuning round
  std::deque<PaceRound> pace;               // the ranks' pace, oldest first (at most kPaceRounds)
  ScrapeTarget pace_target;                 // the ranks `pace` was scraped from
  // The last pass found another process's metrics where a rank should be
  // (progress.h, not_this_rank): what it found, "pod 1 (10.0.0.7:9400): it is
  // ..."; cleared by a pass whose every scrape was the job's own. Such a scrape
  // is never used.
  std::optional<std::string> foreign;
  static constexpr size_t kPaceRounds = 512;
};

struct PollerOptions {
  std::chrono::milliseconds progress_every{10000};  // 0: no progress scrapes
  std::chrono::milliseconds tuning_every = tuner::TunerOptions{}.poll;
  std::chrono::milliseconds progress_timeout{1000};
  std::chrono::milliseconds tuning_timeout{3000};
  std::chrono::milliseconds stragglers_every{2000};
  int threads = 4;  // jobs scraped at once
  int rank_concurrency = 16;  // ranks of one pass scraped at once (1: one after another, in order)
  // Called after every pass: whether it read every rank (tuning or
  // stragglers) or only rank 0, how many ranks it scraped, its wall time.
  std::function<void(bool every_rank, size_t scraped, double seconds)> on_pass;
};

class ScrapePoller {
 public:
  using ScrapeFn = std::function<scrape::ScrapeResult(const scrape::Endpoint&,
                                                      std::chrono::milliseconds timeout)>;
  using Notify = std::function<void(const std::string& key)>;

  // `scrape` defaults to scrape::scrape (HTTP); `now` to the system clock.
  explicit ScrapePoller(PollerOptions opts = {}, ScrapeFn scrape = {},
                        std::function<TimePoint()> now = {});
  ~ScrapePoller();
  ScrapePoller(const ScrapePoller&) = delete;
  ScrapePoller& operator=(const ScrapePoller&) = delete;

  const PollerOptions& options() const { return opts_; }
  void set_notify(Notify notify);  // before start()

  // What to scrape for the job `key` (ns/name) from now on.
  void watch(const std::string& key, const ScrapeTarget& target);
  // Scrape nothing for `key`, keep its figures and schedule; no-op for an unknown key.
  void pause(const std::string& key);
  // Drop `key` and its figures (a pass under way for it is discarded).
  void forget(const std::string& key);
  std::optional<ScrapedFigures> latest(const std::string& key) const;

  void start();  // opts.threads threads; idempotent
  void stop();   // joins them
  // Runs every pass due now on the calling thread (tests, without start()).
  void poll_due();

 private:
  struct Job {
    ScrapeTarget target;
    TimePoint next_progress{}, next_tuning{}, next_stragglers{};  // epoch: due at once
    bool busy = false;                         // a pass runs
    uint64_t epoch = 0;  // changes when the job is forgotten or its uid changes
    ScrapedFigures figures;
  };
  struct Pass {
    std::string key;
    uint64_t epoch = 0;
    ScrapeTarget target;
    bool progress = false, tuning = false, stragglers = false;
  };

  std::optional<TimePoint> due(const Job& j) const;
  // The earliest due job (not busy) at or before `now`, claimed; else nullopt and, in `wake`, when
  // one is due.
  std::optional<Pass> claim(TimePoint now, std::optional<TimePoint>* wake);
  struct PassScrapes;
  void run_pass(const Pass& pass);
  void publish(const Pass& pass, TimePoint at, PassScrapes& ps);
  // Runs scrape(i) for every i in [0, n), at most rank_concurrency at once;
  // the results in order.
  std::vector<scrape::ScrapeResult> fan_out(size_t n, const std::function<scrape::ScrapeResult(size_t)>& scrape) const;
  void run(std::stop_token stop);

  PollerOptions opts_;
  ScrapeFn scrape_;
  std::function<TimePoint()> now_;
  Notify notify_;
  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::map<std::string, Job> jobs_;
  uint64_t next_epoch_ = 1;
  uint64_t next_seq_ = 1;
  uint64_t wakeups_ = 0;  // counts changes a waiting thread must look at
  std::vector<std::jthread> threads_;
};

}  // namespace weft::tj
