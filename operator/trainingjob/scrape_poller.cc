#include "trainingjob/scrape_poller.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <string>

#include "scrape/http_scraper.h"
#include "weft_metrics.h"

namespace weft::tj {

namespace cm = contract::metrics;

ScrapePoller::ScrapePoller(PollerOptions opts, ScrapeFn scrape, std::function<TimePoint()> now)
    : opts_(opts),
      scrape_(scrape
                  ? std::move(scrape)
                  : [](const scrape::Endpoint& ep,
                       std::chrono::milliseconds timeout) { return scrape::scrape(ep, timeout); }),
      now_(now ? std::move(now) : [] { return std::chrono::system_clock::now(); }) {}

ScrapePoller::~ScrapePoller() { stop(); }

void ScrapePoller::set_notify(Notify notify) {
  std::lock_guard lock(mu_);
  notify_ = std::move(notify);
}

void ScrapePoller::watch(const std::string& key, const ScrapeTarget& target) {
  {
    std::lock_guard lock(mu_);
    auto [it, added] = jobs_.try_emplace(key);
    Job& j = it->second;
    if (added || j.figures.uid != target.uid) {
      // A new job, or another job under the same name: nothing of the old one carries over.
      j = Job{};
      j.epoch = next_epoch_++;
      j.figures.uid = target.uid;
    } else if (j.target == target) {
      return;
    }
    // Another gang (attempt, ranks): its pace starts afresh.
    if (!j.target.same_ranks(target)) j.figures.pace.clear();
    j.target = target;
    j.figures.pace_target = target;
    ++wakeups_;
  }
  cv_.notify_all();
}

void ScrapePoller::pause(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return;
  it->second.target.progress = it->second.target.tuning = it->second.target.stragglers = false;
}

void ScrapePoller::forget(const std::string& key) {
  {
    std::lock_guard lock(mu_);
    if (!jobs_.erase(key)) return;
    ++wakeups_;
  }
  cv_.notify_all();
}

std::optional<ScrapedFigures> ScrapePoller::latest(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return std::nullopt;
  return it->second.figures;
}

std::optional<TimePoint> ScrapePoller::due(const Job& j) const {
  if (j.target.ranks.empty() || j.target.port <= 0) return std::nullopt;
  std::optional<TimePoint> at;
  if (j.target.progress && opts_.progress_every.count() > 0) at = j.next_progress;
  if (j.target.tuning) at = at ? std::min(*at, j.next_tuning) : j.next_tuning;
  if (j.target.stragglers) at = at ? std::min(*at, j.next_stragglers) : j.next_stragglers;
  return at;
}

std::optional<ScrapePoller::Pass> ScrapePoller::claim(TimePoint now,
                                                      std::optional<TimePoint>* wake) {
  Job* best = nullptr;
  const std::string* best_key = nullptr;
  std::optional<TimePoint> best_at;
  for (auto& [key, j] : jobs_) {
    if (j.busy) continue;
    const auto at = due(j);
    if (at && (!best_at || *at < *best_at)) {
      best_at = at;
      best = &j;
      best_key = &key;
    }
  }
  if (!best) return std::nullopt;
  if (*best_at > now) {
    *wake = best_at;
    return std::nullopt;
  }
  Pass p{*best_key, best->epoch, best->target};
  p.progress =
      best->target.progress && opts_.progress_every.count() > 0 && best->next_progress <= now;
  p.tuning = best->target.tuning && best->next_tuning <= now;
  p.stragglers = best->target.stragglers && best->next_stragglers <= now;
  if (p.progress) best->next_progress = now + opts_.progress_every;
  if (p.tuning) best->next_tuning = now + opts_.tuning_every;
  if (p.stragglers) best->next_stragglers = now + opts_.stragglers_every;
  best->busy = true;
  return p;
}

std::vector<scrape::ScrapeResult> ScrapePoller::fan_out(
    size_t n, const std::function<scrape::ScrapeResult(size_t)>& scrape) const {
  std::vector<scrape::ScrapeResult> out(n);
  const size_t workers = std::min(n, static_cast<size_t>(std::max(1, opts_.rank_concurrency)));
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) out[i] = scrape(i);
    return out;
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) out[i] = scrape(i);
  };
  std::vector<std::jthread> helpers;
  for (size_t w = 1; w < workers; ++w) helpers.emplace_back(work);
  work();
  return out;  // the helpers join first
}

// One pass over a job's ranks: what it scraped, and its steps (the tuner's
// round, the straggler round, rank 0's progress), each reusing the scrapes
// of the steps before it.
struct ScrapePoller::PassScrapes {
  PassScrapes(const ScrapePoller& p, const Pass& what) : poller(p), pass(what) {}
  const ScrapePoller& poller;
  const Pass& pass;
  std::mutex seen_mu;  // scrapes of one pass may run at once (fan_out)
  std::optional<std::string> foreign;  // the first rank whose metrics are not its own
  bool matched = false;                // some rank's metrics were its own
  std::atomic<size_t> scrapes{0};
  std::optional<Progress> progress;
  bool rank0_tried = false;
  std::optional<ScrapedRound> round;
  std::optional<PaceRound> pace;
  // A rank scraped for the tuner in this pass serves the straggler round too.
  std::map<int, scrape::Exposition> scraped;

  // Every scrape goes through here: one whose metrics are not this job's rank
  // (another process on the port, a previous attempt) is a failed scrape.
  scrape::ScrapeResult scrape_rank(int rank, const std::string& ip, std::chrono::milliseconds timeout) {
    ++scrapes;
    const int port = pass.target.port;
    scrape::ScrapeResult got = poller.scrape_({ip, port, "/metrics"}, timeout);
    if (!got.ok()) return got;
    const std::string why = not_this_rank(got.metrics, pass.target.uid, pass.target.attempt, rank);
    std::lock_guard lock(seen_mu);
    if (why.empty()) {
      matched = true;
      return got;
    }
    got.error = "pod " + std::to_string(rank) + " (" + ip + ":" + std::to_string(port) + "): " + why;
    got.metrics = {};
    if (!foreign) foreign = got.error;
    return got;
  }

  // The tuner's round: one missing sample voids it, and the ranks after it
  // are not scraped, except rank 0, whose cap an auto-sized job starts
  // from. In waves of rank_concurrency; once the round is void, one rank at
  // a time.
  void tuner_round() {
    const auto& ranks = pass.target.ranks;
    round.emplace();
    round->target = pass.target;
    const size_t wave_max = static_cast<size_t>(std::max(1, poller.opts_.rank_concurrency));
    for (size_t i = 0; i < ranks.size();) {
      const bool void_now = !round->ranks.empty() && !round->ranks.back().sample;
      const size_t wave = void_now ? 1 : std::min(wave_max, ranks.size() - i);
      std::vector<scrape::ScrapeResult> got = poller.fan_out(wave, [&](size_t k) {
        const auto& [rank, ip] = ranks[i + k];
        if (void_now && rank != 0) return scrape::ScrapeResult{{}, "not scraped"};
        return scrape_rank(rank, ip, poller.opts_.tuning_timeout);
      });
      for (size_t k = 0; k < wave; ++k, ++i) take_tuner_sample(ranks[i].first, got[k]);
    }
  }

  void take_tuner_sample(int rank, const scrape::ScrapeResult& got) {
    tuner::RankObservation o{rank, std::nullopt, "not scraped"};
    // A rank the wave scraped serves the straggler round too, even when an
    // earlier rank of the wave voided the tuner's round.
    if (got.ok() && pass.stragglers) scraped[rank] = got.metrics;
    const bool round_void = !round->ranks.empty() && !round->ranks.back().sample;
    if (!round_void || rank == 0) {
      if (got.ok()) o.sample = tuner::read_rank_sample(got.metrics);
      o.error = got.ok() ? (o.sample ? "" : std::string("no ") + cm::kStep.name + "/" + cm::kBucketCapBytes.name +
                                                "/" + cm::kStepSeconds.name + " yet")
                         : got.error;
      if (rank == 0 && pass.progress) {  // one scrape of rank 0 serves both
        rank0_tried = true;
        if (got.ok()) progress = progress_from_metrics(got.metrics);
      }
    }
    round->ranks.push_back(std::move(o));
  }

  // Every rank's pace, from the tuner's scrapes where it made them.
  void straggler_round() {
    const auto& ranks = pass.target.ranks;
    std::vector<size_t> todo;  // indices of ranks the tuner's round did not scrape
    for (size_t i = 0; i < ranks.size(); ++i)
      if (!scraped.count(ranks[i].first)) todo.push_back(i);
    // After the first rank without a pace, the rest are not scraped: the round is dropped anyway.
    std::atomic<bool> failed{false};
    std::vector<scrape::ScrapeResult> fresh = poller.fan_out(todo.size(), [&](size_t k) {
      if (failed) return scrape::ScrapeResult{{}, "not scraped"};
      const int rank = ranks[todo[k]].first;
      scrape::ScrapeResult got = scrape_rank(rank, ranks[todo[k]].second, poller.opts_.tuning_timeout);
      if (!got.ok() || !read_pace(rank, got.metrics)) failed = true;
      return got;
    });
    pace.emplace();
    size_t k = 0;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const int rank = ranks[i].first;
      scrape::ScrapeResult got;
      if (auto it = scraped.find(rank); it != scraped.end())
        got.metrics = std::move(it->second);
      else
        got = std::move(fresh[k++]);
      std::optional<PaceSample> p = got.ok() ? read_pace(rank, got.metrics) : std::nullopt;
      if (!p) {  // a round without every rank cannot compare them
        spdlog::debug("stragglers: rank {}: {}", rank,
                      got.ok() ? std::string("no ") + cm::kComputeSeconds.name + " yet" : got.error);
        pace.reset();
        break;
      }
      if (rank == 0 && pass.progress && !rank0_tried) {  // one scrape of rank 0 serves both
        rank0_tried = true;
        progress = progress_from_metrics(got.metrics);
      }
      pace->ranks.push_back(*p);
    }
  }

  // Rank 0's progress, unless a round above read it.
  void rank0_progress() {
    for (const auto& [rank, ip] : pass.target.ranks) {
      if (rank != 0) continue;
      scrape::ScrapeResult got = scrape_rank(rank, ip, poller.opts_.progress_timeout);
      if (got.ok())
        progress = progress_from_metrics(got.metrics);
      else
        spdlog::debug("progress: {}", got.error);
      break;
    }
  }
};

void ScrapePoller::run_pass(const Pass& pass) {
  const TimePoint at = now_();
  const auto wall0 = std::chrono::steady_clock::now();
  PassScrapes ps(*this, pass);
  if (pass.tuning) ps.tuner_round();
  if (pass.stragglers) ps.straggler_round();
  if (pass.progress && !ps.rank0_tried) ps.rank0_progress();
  if (opts_.on_pass)
    opts_.on_pass(pass.tuning || pass.stragglers, ps.scrapes.load(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count());
  publish(pass, at, ps);
}

// Stores a pass's figures (unless the job was forgotten or changed since it
// was claimed) and tells the reconciler when they are new.
void ScrapePoller::publish(const Pass& pass, TimePoint at, PassScrapes& ps) {
  bool fresh = false;
  Notify notify;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(pass.key);
    if (it != jobs_.end() && it->second.epoch == pass.epoch) {
      Job& j = it->second;
      j.busy = false;
      if (ps.foreign && j.figures.foreign != ps.foreign) {
        j.figures.foreign = ps.foreign;
        fresh = true;
      } else if (!ps.foreign && ps.matched && j.figures.foreign) {
        j.figures.foreign.reset();
        fresh = true;
      }
      if (ps.progress) {
        j.figures.progress = ScrapedProgress{*ps.progress, at};
        fresh = true;
      }
      if (ps.pace) {
        ps.pace->at = at;
        j.figures.pace.push_back(std::move(*ps.pace));
        while (j.figures.pace.size() > ScrapedFigures::kPaceRounds) j.figures.pace.pop_front();
        fresh = true;
      }
      if (ps.round) {
        ps.round->at = at;
        ps.round->seq = next_seq_++;
        j.figures.round = std::move(*ps.round);
        fresh = true;
      }
    }
    ++wakeups_;
    notify = notify_;
  }
  cv_.notify_all();
  if (fresh && notify) notify(pass.key);
}

void ScrapePoller::poll_due() {
  const TimePoint now = now_();
  for (;;) {
    std::optional<Pass> pass;
    {
      std::lock_guard lock(mu_);
      std::optional<TimePoint> wake;
      pass = claim(now, &wake);
    }
    if (!pass) return;
    run_pass(*pass);
  }
}

void ScrapePoller::run(std::stop_token stop) {
  std::unique_lock lock(mu_);
  while (!stop.stop_requested()) {
    std::optional<TimePoint> wake;
    if (auto pass = claim(now_(), &wake)) {
      lock.unlock();
      run_pass(*pass);
      lock.lock();
      continue;
    }
    // Until a job is due, or watch/forget/another pass changed what is.
    const uint64_t seen = wakeups_;
    auto changed = [&] { return wakeups_ != seen; };
    if (wake)
      cv_.wait_for(lock, stop, *wake - now_(), changed);
    else
      cv_.wait(lock, stop, changed);
  }
}

void ScrapePoller::start() {
  std::lock_guard lock(mu_);
  if (!threads_.empty()) return;
  for (int i = 0; i < std::max(1, opts_.threads); ++i)
    threads_.emplace_back([this](std::stop_token stop) { run(stop); });
}

void ScrapePoller::stop() {
  std::vector<std::jthread> threads;
  {
    std::lock_guard lock(mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.request_stop();
  threads.clear();  // joins
}

}  // namespace weft::tj
