#include "tuner/bucket_tuner.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <cstdio>

#include "tuner/search.h"

namespace weft::tuner {
namespace {

std::string mb_text(double mb) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g MiB", mb);
  return buf;
}

std::string ms_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", seconds * 1e3);
  return buf;
}

}  // namespace

std::string format_mb(double mb) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, mb);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(mb);
}

BucketTuner::BucketTuner(TunerMetrics* metrics, ScrapeFn scrape, TunerOptions opts)
    : metrics_(metrics), scrape_(std::move(scrape)), opts_(opts) {
  if (!scrape_) scrape_ = [](const scrape::Endpoint& ep) { return scrape::scrape(ep, std::chrono::seconds(3)); };
}

void BucketTuner::forget(const std::string& uid) {
  std::lock_guard lock(mu_);
  open_.erase(uid);
}

std::shared_ptr<TrialWindow> BucketTuner::window_for(const TuneRequest& req, size_t trial, double mb) {
  std::lock_guard lock(mu_);
  Open& o = open_[req.uid];
  if (!o.window || o.attempt != req.attempt || o.trial != trial || o.window->bucket_mb() != mb)
    o = Open{req.attempt, trial, std::make_shared<TrialWindow>(mb, req.replicas)};
  return o.window;
}

std::optional<double> BucketTuner::reported_start_mb(const TuneRequest& req) {
  for (const RankEndpoint& r : req.ranks) {
    if (r.rank != 0 || r.ip.empty()) continue;
    scrape::ScrapeResult got = scrape_({r.ip, req.metrics_port, "/metrics"});
    if (!got.ok()) return std::nullopt;
    const std::optional<RankSample> s = read_rank_sample(got.metrics);
    // Before its first step a rank may still report no cap (or 0).
    if (!s || !(s->cap_bytes > 0)) return std::nullopt;
    return s->cap_bytes / (1024.0 * 1024.0);
  }
  return std::nullopt;
}

TuneResult BucketTuner::tune(const TuneRequest& req) {
  TuneResult out;
  tj::TuningStatus st;
  // The start size: the spec's, or (auto) what rank 0 runs with, measured
  // first like any other; later calls find it as the first trial.
  double start_mb = req.start_mb;
  if (!(start_mb > 0) && req.status && !req.status->trials.empty()) start_mb = req.status->trials.front().bucket_mb;
  if (req.status) {
    st = *req.status;
  } else {
    if (!(start_mb > 0)) {
      const std::optional<double> reported = reported_start_mb(req);
      if (!reported) {
        out.requeue_after = opts_.poll;  // rank 0 has not reported its auto size yet
        return out;
      }
      start_mb = *reported;
    }
    st.state = tj::TuningState::Searching;
    st.current_bucket_mb = start_mb;
    st.trials.push_back(tj::TuningTrial{.bucket_mb = start_mb, .steps = 0, .median_step_seconds = {}, .exposed_comm_seconds = {}, .score = {}});
    out.events.push_back({"Normal", kReasonTuningStarted,
                          "tuning the bucket size from " + mb_text(start_mb) + (req.start_mb > 0 ? "" : " (auto)") +
                              " within [" +
                              mb_text(req.tuning.min_mb) + ", " + mb_text(req.tuning.max_mb) + "], at most " +
                              std::to_string(req.tuning.max_trials) + " trials of " +
                              std::to_string(req.tuning.steps_per_trial) + " steps" +
                              (req.tuning.confirm_rounds > 0
                                   ? ", then a final check of " + std::to_string(req.tuning.confirm_rounds) + " rounds"
                                   : std::string())});
  }
  // Whatever happens below, the ConfigMap holds what status says is current
  // (it may lag after a failed write or an operator restart between the two).
  const bool converged_before = st.state == tj::TuningState::Converged;
  if (st.state != tj::TuningState::Searching) {
    out.write_mb = st.current_bucket_mb;
    out.status = st;
    if (metrics_) metrics_->set_bucket(req.ns, req.name, st.current_bucket_mb, converged_before);
    return out;
  }

  const SearchSpace space{req.tuning.min_mb, req.tuning.max_mb, start_mb, std::max(1, req.tuning.max_trials),
                          opts_.min_improvement, std::max(0, req.tuning.confirm_rounds)};
  // Asks the search what comes after the scored trials, and records it.
  auto decide = [&] {
    std::vector<ScoredTrial> done;
    for (const tj::TuningTrial& t : st.trials)
      if (t.score) done.push_back({t.bucket_mb, *t.score});
    const SearchStep next = next_search_step(space, done);
    if (!next.done) {
      st.trials.push_back(tj::TuningTrial{.bucket_mb = next.bucket_mb, .steps = 0, .median_step_seconds = {}, .exposed_comm_seconds = {}, .score = {}});
      st.current_bucket_mb = next.bucket_mb;
      out.events.push_back({"Normal", kReasonTrialStarted,
                            "trial " + std::to_string(st.trials.size()) + ": " + mb_text(next.bucket_mb) + " (" +
                                next.why + ")"});
      return;
    }
    st.state = tj::TuningState::Converged;
    st.chosen_bucket_mb = st.current_bucket_mb = next.bucket_mb;
    std::string msg = "chose " + mb_text(next.bucket_mb) + " after " + std::to_string(done.size()) + " trials (" +
                      next.why + ")";
    if (!done.empty()) {
      // The latest trial of each (after a final check, one of its own).
      double chosen_score = done.front().score, start_score = done.front().score;
      for (const ScoredTrial& t : done) {
        if (t.bucket_mb == next.bucket_mb) chosen_score = t.score;
        if (t.bucket_mb == done.front().bucket_mb) start_score = t.score;
      }
      msg += ": median step " + ms_text(chosen_score) + " vs " + ms_text(start_score) + " at the start size " +
             mb_text(done.front().bucket_mb);
    }
    out.events.push_back({"Normal", kReasonConverged, msg});
    spdlog::info("{}/{}: bucket-size tuning {}", req.ns, req.name, msg);
  };

  if (st.trials.empty() || st.trials.back().score) {
    decide();  // e.g. the operator restarted between a trial's end and the next
  } else {
    const size_t idx = st.trials.size() - 1;
    tj::TuningTrial& trial = st.trials[idx];
    st.current_bucket_mb = trial.bucket_mb;
    std::vector<RankSample> round(req.replicas);
    bool complete_round = static_cast<int>(req.ranks.size()) == req.replicas;
    for (const RankEndpoint& r : req.ranks) {
      if (!complete_round) break;
      if (r.rank < 0 || r.rank >= req.replicas || r.ip.empty()) {
        complete_round = false;
        break;
      }
      scrape::ScrapeResult got = scrape_({r.ip, req.metrics_port, "/metrics"});
      std::optional<RankSample> sample;
      if (got.ok()) sample = read_rank_sample(got.metrics);
      if (!sample) {
        spdlog::debug("{}/{}: tuner scrape of rank {}: {}", req.ns, req.name, r.rank,
                      got.ok() ? "no weft_step/weft_bucket_cap_bytes/weft_step_seconds yet" : got.error);
        if (metrics_) metrics_->scrape_failed();
        complete_round = false;
        break;
      }
      round[r.rank] = *sample;
    }
    if (complete_round) {
      auto window = window_for(req, idx, trial.bucket_mb);
      window->add(round);
      trial.steps = window->steps();
      if (trial.steps >= req.tuning.steps_per_trial && window->median_step_seconds()) {
        trial.median_step_seconds = window->median_step_seconds();
        trial.exposed_comm_seconds = window->median_exposed_seconds();
        trial.score = trial.median_step_seconds;
        out.events.push_back({"Normal", kReasonTrialCompleted,
                              "trial " + std::to_string(idx + 1) + ": " + mb_text(trial.bucket_mb) + ", median step " +
                                  ms_text(*trial.median_step_seconds) + ", exposed comm " +
                                  ms_text(trial.exposed_comm_seconds.value_or(0)) + " over " +
                                  std::to_string(trial.steps) + " steps"});
        if (metrics_) metrics_->trial_completed(req.ns, req.name, trial.bucket_mb, *trial.median_step_seconds);
        decide();
      }
    }
  }
  out.write_mb = st.current_bucket_mb;
  const bool converged = st.state == tj::TuningState::Converged;
  if (converged) forget(req.uid);
  else out.requeue_after = opts_.poll;
  if (metrics_) metrics_->set_bucket(req.ns, req.name, st.current_bucket_mb, converged);
  out.status = std::move(st);
  return out;
}

}  // namespace weft::tuner
