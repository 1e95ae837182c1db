#include "tuner/bucket_tuner.h"

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

// The cap rank 0 reports, in MiB; nullopt until it reports one.
std::optional<double> reported_start_mb(const TuneRequest& req) {
  for (const RankObservation& r : req.ranks) {
    if (r.rank != 0) continue;
    // Before its first step a rank may still report no cap (or 0).
    if (!r.sample || !(r.sample->cap_bytes > 0)) return std::nullopt;
    return r.sample->cap_bytes / (1024.0 * 1024.0);
  }
  return std::nullopt;
}

}  // namespace

std::string format_mb(double mb) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, mb);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(mb);
}

bool needs_samples(const std::optional<tuning::TuningStatus>& status) {
  return !status || status->state == tuning::TuningState::Searching;
}

TuneDecision decide_tuning(const TuneRequest& req, const OpenTrial* open, const TunerOptions& opts) {
  TuneDecision out;
  tuning::TuningStatus st;
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
        out.requeue_after = opts.poll;  // rank 0 has not reported its auto size yet
        return out;
      }
      start_mb = *reported;
    }
    st.state = tuning::TuningState::Searching;
    st.current_bucket_mb = start_mb;
    st.trials.push_back(tuning::TuningTrial{.bucket_mb = start_mb, .steps = 0, .median_step_seconds = {}, .exposed_comm_seconds = {}, .score = {}});
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
  if (st.state != tuning::TuningState::Searching) {
    out.write_mb = st.current_bucket_mb;
    out.status = st;
    return out;
  }

  const SearchSpace space{req.tuning.min_mb, req.tuning.max_mb, start_mb, std::max(1, req.tuning.max_trials),
                          opts.min_improvement, std::max(0, req.tuning.confirm_rounds)};
  // Asks the search what comes after the scored trials, and records it.
  auto decide = [&] {
    std::vector<ScoredTrial> done;
    for (const tuning::TuningTrial& t : st.trials)
      if (t.score) done.push_back({t.bucket_mb, *t.score});
    const SearchStep next = next_search_step(space, done);
    if (!next.done) {
      st.trials.push_back(tuning::TuningTrial{.bucket_mb = next.bucket_mb, .steps = 0, .median_step_seconds = {}, .exposed_comm_seconds = {}, .score = {}});
      st.current_bucket_mb = next.bucket_mb;
      out.events.push_back({"Normal", kReasonTrialStarted,
                            "trial " + std::to_string(st.trials.size()) + ": " + mb_text(next.bucket_mb) + " (" +
                                next.why + ")"});
      return;
    }
    st.state = tuning::TuningState::Converged;
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
  };

  if (st.trials.empty() || st.trials.back().score) {
    decide();  // e.g. the operator restarted between a trial's end and the next
  } else {
    const size_t idx = st.trials.size() - 1;
    tuning::TuningTrial& trial = st.trials[idx];
    st.current_bucket_mb = trial.bucket_mb;
    std::vector<RankSample> round(req.replicas);
    bool complete_round = static_cast<int>(req.ranks.size()) == req.replicas;
    for (const RankObservation& r : req.ranks) {
      if (!complete_round) break;
      if (r.rank < 0 || r.rank >= req.replicas) {
        complete_round = false;
        break;
      }
      if (!r.sample) {
        out.scrape_failed = true;
        complete_round = false;
        break;
      }
      round[r.rank] = *r.sample;
    }
    // The trial's window: the one carried in, unless it belongs to another
    // attempt, trial or size (then this trial is measured afresh).
    OpenTrial o;
    if (open && open->attempt == req.attempt && open->trial == idx && open->window.bucket_mb() == trial.bucket_mb)
      o = *open;
    else
      o = OpenTrial{req.attempt, idx, TrialWindow(trial.bucket_mb, req.replicas)};
    if (complete_round) {
      o.window.add(round);
      trial.steps = o.window.steps();
      if (trial.steps >= req.tuning.steps_per_trial && o.window.median_step_seconds()) {
        trial.median_step_seconds = o.window.median_step_seconds();
        trial.exposed_comm_seconds = o.window.median_exposed_seconds();
        trial.score = trial.median_step_seconds;
        out.events.push_back({"Normal", kReasonTrialCompleted,
                              "trial " + std::to_string(idx + 1) + ": " + mb_text(trial.bucket_mb) + ", median step " +
                                  ms_text(*trial.median_step_seconds) + ", exposed comm " +
                                  ms_text(trial.exposed_comm_seconds.value_or(0)) + " over " +
                                  std::to_string(trial.steps) + " steps"});
        out.completed = CompletedTrial{trial.bucket_mb, *trial.median_step_seconds};
        decide();
      }
    }
    // Kept while its trial is the one under way (a completed trial's window
    // is never read again).
    if (!st.trials.empty() && st.trials.size() - 1 == idx && !st.trials.back().score) out.open = std::move(o);
  }
  out.write_mb = st.current_bucket_mb;
  if (st.state != tuning::TuningState::Converged) out.requeue_after = opts.poll;
  out.status = std::move(st);
  return out;
}

}  // namespace weft::tuner
