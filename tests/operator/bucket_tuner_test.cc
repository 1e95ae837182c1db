// The tuner's decision (decide_tuning) against simulated ranks: canned
// expositions that follow the ConfigMap value the tuner writes (one poll
// late, as the workers' step agreement is), with a step time that depends on
// the cap. The tests play the reconciler's part: observe (parse each rank's
// exposition into a sample), decide, keep the window the decision returns.
#include "tuner/bucket_tuner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "canned_exposition.h"
#include "scrape/http_scraper.h"
#include "tuner/trial_window.h"

namespace weft::tuner {
namespace {
namespace cm = contract::metrics;
using weft::testing::rank_info_sample;
using weft::testing::rank_label;
using weft::testing::sample;

struct SimRank {
  double step = 0, sum = 0, count = 0, exposed = 0, cap_bytes = 0;
};

// Two ranks that run `steps_per_poll` steps between scrapes at a step time
// given by `curve(cap_mb)`, and switch to the tuner's value one poll later.
class SimJob {
 public:
  SimJob(std::function<double(double)> curve, double start_mb) : curve_(std::move(curve)), cap_mb_(start_mb) {
    for (auto& r : ranks_) r.cap_bytes = bytes(start_mb);
  }
  static double bytes(double mb) { return std::floor(static_cast<double>(static_cast<float>(mb)) * 1048576); }

  // The tuner's view of rank ip "10.0.0.<rank>".
  scrape::ScrapeResult scrape(const scrape::Endpoint& ep) {
    scrape::ScrapeResult r;
    if (fail_) {
      r.error = "connection refused";
      return r;
    }
    const int rank = ep.host.back() - '0';
    const SimRank& s = ranks_[rank];
    std::string text = std::string("# TYPE ") + cm::kStep.name + " gauge\n" +
                       sample(cm::kStep, std::to_string(s.step), rank_label(rank)) +
                       sample(cm::kBucketCapBytes, std::to_string(s.cap_bytes)) +
                       sample(cm::kStepSecondsSum, std::to_string(s.sum)) +
                       sample(cm::kStepSecondsCount, std::to_string(s.count)) +
                       sample(cm::kExposedCommSeconds, std::to_string(s.exposed), {{cm::kLabelGroup, "dp"}});
    auto parsed = scrape::parse_text(text);
    r.metrics = parsed.exposition;
    return r;
  }
  // The reconciler's observe step: every rank's exposition read as a sample.
  std::vector<RankObservation> observe() {
    std::vector<RankObservation> out;
    for (int rank = 0; rank < static_cast<int>(ranks_.size()); ++rank) {
      scrape::ScrapeResult got = scrape({"10.0.0." + std::to_string(rank), 9400, "/metrics"});
      RankObservation o{rank, std::nullopt, got.error};
      if (got.ok()) o.sample = read_rank_sample(got.metrics);
      out.push_back(std::move(o));
    }
    return out;
  }
  // Time passes between two reconciles: the ranks train, and apply the
  // value the ConfigMap held at the previous poll.
  void advance(std::optional<double> written) {
    for (auto& r : ranks_) {
      r.cap_bytes = bytes(cap_mb_);
      const double t = curve_(cap_mb_);
      r.step += steps_per_poll;
      r.count += steps_per_poll;
      r.sum += steps_per_poll * t;
      r.exposed += steps_per_poll * t * 0.1;
    }
    if (written) cap_mb_ = *written;
  }

  int steps_per_poll = 5;
  bool fail_ = false;
  std::array<SimRank, 2> ranks_;

 private:
  std::function<double(double)> curve_;
  double cap_mb_;
};

TuneRequest request(std::optional<tuning::TuningStatus> status, int confirm_rounds = 0) {
  TuneRequest q;
  q.ns = "ns";
  q.name = "job";
  q.attempt = 0;
  q.tuning = {.enabled = true, .min_mb = 1, .max_mb = 256, .steps_per_trial = 10, .max_trials = 8,
              .confirm_rounds = confirm_rounds};
  q.start_mb = 25;
  q.replicas = 2;
  q.status = std::move(status);
  return q;
}

// The reconciler's part around the decision: the samples of this poll, and
// the open trial's window carried from one call to the next (in memory: a
// new Tuner is an operator restart).
class Tuner {
 public:
  explicit Tuner(SimJob& job) : job_(job) {}
  TuneDecision tune(TuneRequest q) {
    q.ranks = job_.observe();
    TuneDecision d = decide_tuning(q, open_ ? &*open_ : nullptr);
    open_ = d.open;
    return d;
  }

 private:
  SimJob& job_;
  std::optional<OpenTrial> open_;
};

// Best near 50 MiB; the 25 MiB start is ~10 % slower.
double curve(double mb) { return 0.2 + std::ceil(100 / mb) * 0.02 + std::min(mb, 100.0) / 2000; }

// Runs reconciles until the tuner converges (or `limit` polls pass); a new
// tuner object may be swapped in at poll `restart_at` (an operator restart).
tuning::TuningStatus drive(SimJob& job, int limit, int restart_at = -1, std::vector<TuneEvent>* events = nullptr,
                       int confirm_rounds = 0) {
  auto make = [&] { return std::make_unique<Tuner>(job); };
  auto tuner = make();
  std::optional<tuning::TuningStatus> st;
  for (int i = 0; i < limit; ++i) {
    if (i == restart_at) tuner = make();
    TuneDecision r = tuner->tune(request(st, confirm_rounds));
    EXPECT_TRUE(r.status.has_value());
    st = r.status;
    if (events) events->insert(events->end(), r.events.begin(), r.events.end());
    if (st->state != tuning::TuningState::Searching) {
      EXPECT_FALSE(r.requeue_after.has_value());
      break;
    }
    EXPECT_TRUE(r.requeue_after.has_value());
    EXPECT_EQ(r.write_mb, st->current_bucket_mb);
    job.advance(r.write_mb);
  }
  return *st;
}

TEST(BucketTuner, StartsFromTheJobsSizeAndConvergesNearTheBest) {
  SimJob job(curve, 25);
  std::vector<TuneEvent> events;
  tuning::TuningStatus st = drive(job, 500, -1, &events);
  ASSERT_EQ(st.state, tuning::TuningState::Converged);
  ASSERT_TRUE(st.chosen_bucket_mb);
  EXPECT_EQ(st.current_bucket_mb, *st.chosen_bucket_mb);
  EXPECT_EQ(st.trials.front().bucket_mb, 25);
  EXPECT_LE(st.trials.size(), 8u);
  double best = INFINITY;
  for (int i = 0; i <= 1000; ++i) best = std::min(best, curve(std::pow(256.0, i / 1000.0)));
  EXPECT_LE(curve(*st.chosen_bucket_mb), 1.05 * best) << *st.chosen_bucket_mb;
  for (const auto& t : st.trials) {
    ASSERT_TRUE(t.score && t.median_step_seconds && t.exposed_comm_seconds) << t.bucket_mb;
    EXPECT_GE(t.steps, 10);
    // The window only counts steps at the trial's own size.
    EXPECT_NEAR(*t.median_step_seconds, curve(t.bucket_mb), 1e-6) << t.bucket_mb;
    EXPECT_NEAR(*t.exposed_comm_seconds, 0.1 * curve(t.bucket_mb), 1e-6);
  }
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().reason, kReasonTuningStarted);
  EXPECT_EQ(events.back().reason, kReasonConverged);
  int started = 0, completed = 0;
  for (const auto& e : events) started += e.reason == kReasonTrialStarted, completed += e.reason == kReasonTrialCompleted;
  EXPECT_EQ(completed, static_cast<int>(st.trials.size()));
  EXPECT_EQ(started + 1, completed);  // the start trial has no TrialStarted event
}

// bucket_cap_mb auto: the job has no size of its own (start_mb 0); the tuner
// waits until rank 0 reports the size it derived, measures that first and
// searches from it.
TEST(BucketTuner, AnAutoSizedJobStartsFromWhatRankZeroReports) {
  SimJob job(curve, 3.25);
  for (auto& r : job.ranks_) r.cap_bytes = 0;  // before the first step
  Tuner tuner(job);
  TuneRequest q = request(std::nullopt);
  q.start_mb = 0;
  TuneDecision r = tuner.tune(q);
  EXPECT_FALSE(r.status.has_value()) << "nothing to start from yet";
  EXPECT_FALSE(r.write_mb.has_value()) << "the ConfigMap keeps its empty value";
  ASSERT_TRUE(r.requeue_after.has_value());
  job.advance(std::nullopt);
  std::optional<tuning::TuningStatus> st;
  std::vector<TuneEvent> events;
  for (int i = 0; i < 500; ++i) {
    q.status = st;
    r = tuner.tune(q);
    ASSERT_TRUE(r.status.has_value());
    st = r.status;
    events.insert(events.end(), r.events.begin(), r.events.end());
    if (st->state != tuning::TuningState::Searching) break;
    job.advance(r.write_mb);
  }
  ASSERT_EQ(st->state, tuning::TuningState::Converged);
  EXPECT_EQ(st->trials.front().bucket_mb, 3.25);
  ASSERT_FALSE(events.empty());
  EXPECT_NE(events.front().message.find("from 3.25 MiB (auto)"), std::string::npos) << events.front().message;
  double best = INFINITY;
  for (int i = 0; i <= 1000; ++i) best = std::min(best, curve(std::pow(256.0, i / 1000.0)));
  EXPECT_LE(curve(*st->chosen_bucket_mb), 1.05 * best) << *st->chosen_bucket_mb;
}

TEST(BucketTuner, AnOperatorRestartContinuesTheSameSearch) {
  SimJob a(curve, 25), b(curve, 25);
  tuning::TuningStatus straight = drive(a, 500);
  tuning::TuningStatus restarted = drive(b, 500, /*restart_at=*/17);
  ASSERT_EQ(restarted.state, tuning::TuningState::Converged);
  ASSERT_EQ(straight.trials.size(), restarted.trials.size());
  for (size_t i = 0; i < straight.trials.size(); ++i)
    EXPECT_EQ(straight.trials[i].bucket_mb, restarted.trials[i].bucket_mb) << i;
  EXPECT_EQ(straight.chosen_bucket_mb, restarted.chosen_bucket_mb);
}

// spec.tuning.bucketSize.confirmRounds: after the search's trials the
// start and the two best sizes run again, 2 rounds, each a trial of its own
// (its own window, its own events), and an operator restart in the middle
// of the check carries on with the same visits.
TEST(BucketTuner, TheFinalCheckRunsTheTopSizesAgainAndSurvivesARestart) {
  // `curve` is flat from 100 MiB up (one bucket); a slight slope there keeps
  // the choice from hanging on rounding in a tie.
  const auto sloped = [](double mb) { return curve(mb) + mb * 1e-5; };
  SimJob a(sloped, 25);
  std::vector<TuneEvent> events;
  tuning::TuningStatus st = drive(a, 800, -1, &events, 2);
  ASSERT_EQ(st.state, tuning::TuningState::Converged);
  ASSERT_GT(st.trials.size(), 6u);
  const size_t search = st.trials.size() - 6;  // 3 sizes x 2 rounds after it
  EXPECT_LE(search, 8u);
  EXPECT_EQ(st.trials[search].bucket_mb, 25) << "the check starts with the start size";
  for (size_t i = search; i < st.trials.size(); ++i) {
    ASSERT_TRUE(st.trials[i].median_step_seconds);
    EXPECT_NEAR(*st.trials[i].median_step_seconds, sloped(st.trials[i].bucket_mb), 1e-6) << i;
  }
  double best = INFINITY;
  for (int i = 0; i <= 1000; ++i) best = std::min(best, sloped(std::pow(256.0, i / 1000.0)));
  EXPECT_LE(sloped(*st.chosen_bucket_mb), 1.05 * best) << *st.chosen_bucket_mb;
  EXPECT_NE(events.front().message.find("then a final check of 2 rounds"), std::string::npos) << events.front().message;
  EXPECT_NE(events.back().message.find("final check of 3 sizes over 2 rounds"), std::string::npos)
      << events.back().message;
  // Restarts at these polls land in the check (the probe shows it).
  for (int restart_at : {30, 36, 42}) {
    SimJob probe(sloped, 25);
    const tuning::TuningStatus then = drive(probe, restart_at, -1, nullptr, 2);
    ASSERT_GE(then.trials.size(), search + 1) << restart_at << ": not in the check yet";
    ASSERT_EQ(then.state, tuning::TuningState::Searching) << restart_at << ": already over";
    SimJob b(sloped, 25);
    tuning::TuningStatus restarted = drive(b, 800, restart_at, nullptr, 2);
    ASSERT_EQ(restarted.trials.size(), st.trials.size()) << restart_at;
    for (size_t i = 0; i < st.trials.size(); ++i)
      EXPECT_EQ(restarted.trials[i].bucket_mb, st.trials[i].bucket_mb) << restart_at << " " << i;
    EXPECT_EQ(restarted.chosen_bucket_mb, st.chosen_bucket_mb) << restart_at;
  }
}

TEST(BucketTuner, NothingCountsUntilEveryRankReportsTheTrialsCap) {
  SimJob job(curve, 25);
  Tuner tuner(job);
  tuning::TuningStatus st;
  st.current_bucket_mb = 25;
  st.trials = {{.bucket_mb = 25, .steps = 0, .median_step_seconds = 0.3, .exposed_comm_seconds = 0.01, .score = 0.3},
               {.bucket_mb = 1, .steps = 0, .median_step_seconds = {}, .exposed_comm_seconds = {}, .score = {}}};
  // The ranks still run 25 MiB: the 1 MiB trial's window stays closed.
  for (int i = 0; i < 6; ++i) {
    TuneDecision r = tuner.tune(request(st));
    EXPECT_EQ(r.write_mb, 1);
    EXPECT_EQ(r.status->trials[1].steps, 0);
    job.advance(std::nullopt);
  }
  // Only rank 0 switched: still closed.
  job.ranks_[0].cap_bytes = SimJob::bytes(1);
  EXPECT_EQ(tuner.tune(request(st)).status->trials[1].steps, 0);
}

TEST(BucketTuner, ScrapeFailuresWaitAndConvergedJobsOnlyKeepTheirValue) {
  SimJob job(curve, 25);
  job.fail_ = true;
  Tuner tuner(job);
  TuneDecision first = tuner.tune(request(std::nullopt));
  ASSERT_TRUE(first.status);
  EXPECT_EQ(first.status->state, tuning::TuningState::Searching);
  EXPECT_EQ(first.status->trials.size(), 1u);
  EXPECT_TRUE(first.requeue_after);
  EXPECT_EQ(first.write_mb, 25);
  EXPECT_TRUE(first.scrape_failed) << "the reconciler counts it in weft_operator_tuner_scrape_errors";

  tuning::TuningStatus done;
  done.state = tuning::TuningState::Converged;
  done.current_bucket_mb = 8;
  done.chosen_bucket_mb = 8;
  TuneDecision again = tuner.tune(request(done));
  EXPECT_EQ(again.write_mb, 8);
  EXPECT_FALSE(again.requeue_after);
  EXPECT_EQ(*again.status, done);
  EXPECT_TRUE(again.events.empty());
}

// The decision is a function of what it is handed: samples built here, no
// scraper, no server, no clock. Two ranks at a 4 MiB trial run 2 steps per
// poll at 0.5 s and 0.3 s a step; the trial needs 4 steps, so the window
// opens at the first round and the third completes it with the mean over
// ranks of each interval (0.4 s), and the search moves on. The same inputs
// give the same decision twice.
TEST(BucketTuner, TheDecisionNeedsNoNetworkOnlyTheSamplesHandedIn) {
  const double cap = SimJob::bytes(4);
  auto rank_at = [&](int rank, double steps, double step_s) {
    return RankObservation{rank, RankSample{steps, cap, steps * step_s, steps, steps * step_s / 10}, ""};
  };
  TuneRequest q;
  q.ns = "ns";
  q.name = "job";
  q.tuning = {.enabled = true, .min_mb = 1, .max_mb = 64, .steps_per_trial = 4, .max_trials = 6, .confirm_rounds = 0};
  q.start_mb = 4;
  q.replicas = 2;
  q.ranks = {rank_at(0, 10, 0.5), rank_at(1, 10, 0.3)};
  const TuneDecision started = decide_tuning(q, nullptr);
  ASSERT_TRUE(started.status);
  ASSERT_EQ(started.status->trials.size(), 1u);
  EXPECT_EQ(started.status->trials[0].bucket_mb, 4);
  EXPECT_EQ(started.write_mb, 4);
  ASSERT_TRUE(started.open) << "the window opened on the first round";
  EXPECT_TRUE(started.open->window.open());
  EXPECT_EQ(started.status, decide_tuning(q, nullptr).status) << "same inputs, same decision";

  q.status = started.status;
  q.ranks = {rank_at(0, 12, 0.5), rank_at(1, 12, 0.3)};
  const TuneDecision second = decide_tuning(q, &*started.open);
  EXPECT_EQ(second.status->trials[0].steps, 2);
  EXPECT_FALSE(second.completed);
  // Without the carried window the same samples only open a new one.
  EXPECT_EQ(decide_tuning(q, nullptr).status->trials[0].steps, 0);

  q.status = second.status;
  q.ranks = {rank_at(0, 14, 0.5), rank_at(1, 14, 0.3)};
  const TuneDecision third = decide_tuning(q, &*second.open);
  const tuning::TuningTrial& t = third.status->trials[0];
  EXPECT_EQ(t.steps, 4);
  ASSERT_TRUE(t.median_step_seconds);
  EXPECT_NEAR(*t.median_step_seconds, 0.4, 1e-12);
  EXPECT_NEAR(*t.exposed_comm_seconds, 0.04, 1e-12);
  ASSERT_TRUE(third.completed);
  EXPECT_EQ(third.completed->bucket_mb, 4);
  ASSERT_EQ(third.status->trials.size(), 2u) << "the search proposes the next size";
  EXPECT_NE(third.status->trials[1].bucket_mb, 4);
  EXPECT_EQ(third.write_mb, third.status->trials[1].bucket_mb);
  EXPECT_FALSE(third.open) << "the completed trial's window is not kept";
  ASSERT_GE(third.events.size(), 2u);
  EXPECT_EQ(third.events[0].reason, std::string(kReasonTrialCompleted));
  EXPECT_EQ(third.events[1].reason, std::string(kReasonTrialStarted));

  // A rank without a sample voids the round, and the decision says so.
  q.status = third.status;
  q.ranks = {rank_at(0, 16, 0.5), RankObservation{1, std::nullopt, "connection refused"}};
  const TuneDecision missing = decide_tuning(q, nullptr);
  EXPECT_TRUE(missing.scrape_failed);
  EXPECT_EQ(missing.status->trials[1].steps, 0);
  // Converged: no samples are needed at all.
  EXPECT_TRUE(needs_samples(std::nullopt));
  EXPECT_TRUE(needs_samples(third.status));
  tuning::TuningStatus done = *third.status;
  done.state = tuning::TuningState::Converged;
  EXPECT_FALSE(needs_samples(done));
}

TEST(TrialWindow, MediansOverIntervalsAndResetOnARestartedRank) {
  TrialWindow w(2, 2);
  auto at = [](double step, double sum, double exposed = 0) {
    return RankSample{step, SimJob::bytes(2), sum, step, exposed};
  };
  w.add({at(10, 5), at(10, 5)});
  EXPECT_TRUE(w.open());
  EXPECT_EQ(w.steps(), 0);
  w.add({at(12, 6, 0.2), at(12, 6, 0.2)});      // 0.5 s/step
  w.add({at(14, 9, 0.4), at(13, 7, 0.4)});      // rank 0 1.5, rank 1 1.0 -> 1.25
  w.add({at(16, 10, 0.6), at(16, 8.5, 0.6)});   // 0.5, 0.5
  EXPECT_EQ(w.steps(), 6);
  EXPECT_EQ(w.intervals(), 3);
  EXPECT_DOUBLE_EQ(*w.median_step_seconds(), 0.5);
  w.add({at(1, 0.5), at(17, 9)});  // rank 0 began again
  EXPECT_FALSE(w.open());
  EXPECT_EQ(w.steps(), 0);
  EXPECT_FALSE(w.median_step_seconds());
  EXPECT_TRUE(reports_cap(SimJob::bytes(0.1), 0.1));
  EXPECT_FALSE(reports_cap(SimJob::bytes(0.1) + 10, 0.1));
}

}  // namespace
}  // namespace weft::tuner
