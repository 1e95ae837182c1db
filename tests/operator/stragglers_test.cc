// Stragglers (spec.stragglers): the policy that names a slow rank from a
// window of the ranks' pace, reading that pace from a rank's metrics, the
// poller's window of rounds, the spec's rules and the CRD's, and the pods of
// a gang relaunched away from a straggler's node.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <mutex>

#include "canned_exposition.h"
#include "test_builders.h"
#include "trainingjob/builders.h"
#include "trainingjob/scrape_poller.h"
#include "trainingjob/straggler_policy.h"

namespace weft::tj {
namespace {
namespace cm = contract::metrics;
using weft::testing::rank_info_sample;
using weft::testing::rank_label;
using weft::testing::sample;
using namespace std::chrono_literals;
using testing::ExpectFirstSpecError;
using testing::MakeJob;

// Rounds of `ranks` ranks, every `every` steps; rank r computes
// compute[r] seconds a step and waits for the slowest the rest of the step.
std::deque<PaceRound> rounds(const std::vector<double>& compute, int n, int every, double jitter = 0) {
  std::deque<PaceRound> out;
  std::vector<double> c(compute.size(), 0), w(compute.size(), 0);
  const double slowest = *std::max_element(compute.begin(), compute.end());
  for (int k = 0; k <= n; ++k) {
    PaceRound r;
    for (size_t i = 0; i < compute.size(); ++i)
      r.ranks.push_back({static_cast<int>(i), static_cast<double>(k * every), c[i], w[i]});
    out.push_back(r);
    for (size_t i = 0; i < compute.size(); ++i) {
      const double wobble = jitter * ((k + i) % 2 ? 1 : -1);
      c[i] += every * (compute[i] + wobble);
      w[i] += every * (slowest - compute[i]);
    }
  }
  return out;
}

StragglerSpec spec(double threshold = 0.2, int window = 20) {
  StragglerSpec s;
  s.threshold = threshold;
  s.window_steps = window;
  return s;
}

TEST(StragglerPolicy, NamesTheRankThatComputesBeyondTheThreshold) {
  const StragglerVerdict v = judge_stragglers(rounds({0.5, 0.5, 0.9, 0.5}, 10, 5), spec());
  ASSERT_TRUE(v.judged);
  EXPECT_EQ(v.steps, 20);  // the newest window of at least 20 steps
  EXPECT_DOUBLE_EQ(v.median_compute, 0.5);
  ASSERT_TRUE(v.straggler);
  EXPECT_EQ(v.straggler->rank, 2);
  EXPECT_DOUBLE_EQ(v.straggler->compute_per_step, 0.9);
  EXPECT_NEAR(v.ratio, 1.8, 1e-12);
  // The others waited for it: 0.4 s a step each.
  EXPECT_NEAR(v.ranks[0].wait_per_step, 0.4, 1e-12);
  EXPECT_NEAR(v.ranks[2].wait_per_step, 0, 1e-12);
}

TEST(StragglerPolicy, NoOneWithinTheThresholdOrBeforeTheWindowIsFull) {
  // 15 % above the median, threshold 20 %: nobody.
  StragglerVerdict v = judge_stragglers(rounds({0.5, 0.575, 0.5, 0.5}, 10, 5), spec());
  ASSERT_TRUE(v.judged);
  EXPECT_FALSE(v.straggler);
  // Noise that averages out over the window is no straggler either.
  v = judge_stragglers(rounds({0.5, 0.5, 0.5, 0.5}, 10, 5, 0.2), spec());
  ASSERT_TRUE(v.judged);
  EXPECT_FALSE(v.straggler);
  // Only 15 steps so far: no judgement.
  v = judge_stragglers(rounds({0.5, 0.5, 0.9, 0.5}, 3, 5), spec());
  EXPECT_FALSE(v.judged);
  EXPECT_FALSE(v.straggler);
  // One rank has no gang to compare with.
  EXPECT_FALSE(judge_stragglers(rounds({0.9}, 10, 5), spec()).judged);
}

// An attempt's first windowSteps steps are slow for reasons that pass:
// rank 2 slow only then is not named once a window past them exists, and no
// window reaches back into them.
TEST(StragglerPolicy, TheFirstStepsOfTheWindowAreNotCompared) {
  std::deque<PaceRound> r = rounds({0.5, 0.5, 0.5, 0.5}, 10, 5);
  for (size_t k = 4; k < r.size(); ++k) r[k].ranks[2].compute += 8;  // 8 s between steps 15 and 20
  StragglerVerdict v = judge_stragglers(r, spec());
  ASSERT_TRUE(v.judged);
  EXPECT_FALSE(v.straggler);
  // Steps 0..35: the window 15..35 would name rank 2, but a window must
  // start at step 20 or later, and none of 20 steps does.
  r.resize(8);
  EXPECT_FALSE(judge_stragglers(r, spec()).judged);
}

TEST(StragglerPolicy, TwoRanksCompareWithTheFasterOne) {
  // The lower middle of an even gang: the slow one of two is named.
  const StragglerVerdict v = judge_stragglers(rounds({0.5, 0.7}, 10, 5), spec());
  ASSERT_TRUE(v.straggler);
  EXPECT_EQ(v.straggler->rank, 1);
}

TEST(StragglerPolicy, RoundsOfAnotherGangAreNotCompared) {
  // Steps 0..50; the rounds up to step 35 lack a rank (another gang's), so
  // the 4-rank rounds span only 15 steps.
  std::deque<PaceRound> r = rounds({0.5, 0.5, 0.9, 0.5}, 10, 5);
  for (auto it = r.begin(); it != r.end() - 4; ++it) it->ranks.pop_back();
  EXPECT_FALSE(judge_stragglers(r, spec()).judged);
}

// Pods get their IPs one by one: the poller's first rounds may hold only the
// ranks that had one. The window starts at the first round of the whole
// gang (it once started at the oldest round, and no window was ever judged).
TEST(StragglerPolicy, RoundsBeforeEveryRankHadAnIpDoNotBlockTheWindow) {
  std::deque<PaceRound> r = rounds({0.5, 0.5, 0.9, 0.5}, 10, 5);
  for (auto it = r.begin(); it != r.begin() + 2; ++it) it->ranks.erase(it->ranks.begin() + 1);
  const StragglerVerdict v = judge_stragglers(r, spec());
  ASSERT_TRUE(v.judged);
  ASSERT_TRUE(v.straggler);
  EXPECT_EQ(v.straggler->rank, 2);
  EXPECT_EQ(v.steps, 20);
}

TEST(StragglerPolicy, ReadsThePaceARankExports) {
  auto parsed = scrape::parse_text(sample(cm::kStep, "40", rank_label(3)) +
                                   sample(cm::kComputeSeconds, "12.5", rank_label(3)) +
                                   sample(cm::kWaitSeconds, "3.25", rank_label(3)));
  const auto p = read_pace(3, parsed.exposition);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->step, 40);
  EXPECT_EQ(p->compute, 12.5);
  EXPECT_EQ(p->wait, 3.25);
  // A worker from before these families: nothing to compare.
  EXPECT_FALSE(read_pace(3, scrape::parse_text(sample(cm::kStep, "40", rank_label(3))).exposition));
}

// The poller scrapes every rank of a job with spec.stragglers each interval
// into a window of rounds; a round with a rank down is dropped, and another
// gang starts a new window.
TEST(StragglerPolicy, ThePollerKeepsAWindowOfEveryRanksPace) {
  std::mutex mu;
  std::map<std::string, double> step;
  std::set<std::string> down;
  std::map<std::string, int> calls;
  int attempt = 0;  // the attempt whose ranks answer
  auto fn = [&](const scrape::Endpoint& ep, std::chrono::milliseconds) {
    std::lock_guard lock(mu);
    ++calls[ep.host];
    const double s = step[ep.host];
    scrape::ScrapeResult r;
    if (down.count(ep.host)) {
      r.error = "connection refused";
      return r;
    }
    const int pod = ep.host[0] - 'a';
    r.metrics = scrape::parse_text(sample(cm::kStep, std::to_string(s)) + sample(cm::kComputeSeconds, std::to_string(s * 0.5)) +
                                   sample(cm::kWaitSeconds, std::to_string(s * 0.1)) +
                                   rank_info_sample("uid", attempt, pod))
                    .exposition;
    return r;
  };
  TimePoint now = TimePoint{} + 1000h;
  PollerOptions o;
  o.progress_every = 0s;
  o.stragglers_every = 2s;
  ScrapePoller poller(o, fn, [&] { return now; });
  ScrapeTarget t{"uid", 0, 9400, {{0, "a"}, {1, "b"}}, false, false, true};
  poller.watch("ns/j", t);
  for (int k = 0; k < 3; ++k) {
    step["a"] = step["b"] = 10.0 * k;
    poller.poll_due();
    now += 2s;
  }
  auto f = poller.latest("ns/j");
  ASSERT_TRUE(f);
  ASSERT_EQ(f->pace.size(), 3u);
  EXPECT_EQ(f->pace.back().ranks[1].step, 20);
  EXPECT_EQ(f->pace.back().ranks[1].compute, 10);
  EXPECT_TRUE(f->pace_target.same_ranks(t));
  down.insert("b");
  poller.poll_due();
  now += 2s;
  EXPECT_EQ(poller.latest("ns/j")->pace.size(), 3u) << "a round with a rank down compares nothing";
  down.clear();
  t.attempt = attempt = 1;  // the next gang
  poller.watch("ns/j", t);
  EXPECT_TRUE(poller.latest("ns/j")->pace.empty());
  poller.poll_due();
  EXPECT_EQ(poller.latest("ns/j")->pace.size(), 1u);
  // With the tuner's rounds due in the same pass, one scrape a rank serves both.
  t.tuning = true;
  poller.watch("ns/j", t);
  calls.clear();
  now += 2s;
  poller.poll_due();
  EXPECT_EQ(calls, (std::map<std::string, int>{{"a", 1}, {"b", 1}}));
  EXPECT_EQ(poller.latest("ns/j")->pace.size(), 2u);
}

TEST(Stragglers, SpecRulesNameTheField) {
  const Json metrics = {{"preset", "tiny"}, {"metrics", {{"port", 9400}}}};
  auto job = [&](const Json& st) { return MakeJob("j", "n").Replicas(4).Spec("worker", metrics).Spec("stragglers", st).Obj(); };
  ExpectFirstSpecError(job({{"threshold", 0.2}, {"windowSteps", 20}, {"action", "replace"}}), "");
  ExpectFirstSpecError(job(Json::object()), "");
  ExpectFirstSpecError(job({{"threshold", 0}}), "spec.stragglers.threshold");
  ExpectFirstSpecError(job({{"windowSteps", 1}}), "spec.stragglers.windowSteps");
  ExpectFirstSpecError(job({{"action", "evict"}}), "spec.stragglers.action");
  ExpectFirstSpecError(job("on"), "spec.stragglers");
  Json no_metrics = {{"preset", "tiny"}, {"metrics", {{"port", 0}}}};
  ExpectFirstSpecError(MakeJob("j", "n").Spec("worker", no_metrics).Spec("stragglers", Json::object()).Obj(),
                       "spec.stragglers");
}

// A gang relaunched away from a straggler's node: every required term of the
// pods' node affinity (the template's own too) excludes it.
TEST(Stragglers, AvoidedNodesAreExcludedFromEveryRequiredTerm) {
  const Json affinity = {{"nodeAffinity",
                          {{"requiredDuringSchedulingIgnoredDuringExecution",
                            {{"nodeSelectorTerms",
                              {{{"matchExpressions", {{{"key", "gpu"}, {"operator", "In"}, {"values", {"h100"}}}}}},
                               {{"matchExpressions", {{{"key", "gpu"}, {"operator", "In"}, {"values", {"h200"}}}}}}}}}}}}};
  const MakeJob make = MakeJob("j", "n").Template({{"affinity", affinity}});
  TrainingJobSpec spec = make.TypedSpec();
  EXPECT_EQ(build_pod(make.Obj(), spec, 0, 0)["spec"]["affinity"], affinity) << "nothing avoided: the template's";
  spec.avoid_nodes = {"node-7"};
  const Json terms = build_pod(make.Obj(), spec, 0, 1)["spec"]["affinity"]["nodeAffinity"]
                                ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
  ASSERT_EQ(terms.size(), 2u);
  const Json not_in = {{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"node-7"}}};
  for (const auto& t : terms) {
    EXPECT_EQ(t["matchFields"], Json::array({not_in}));
    EXPECT_EQ(t["matchExpressions"].size(), 1u);
  }
  // Without a template affinity: one term of its own.
  const MakeJob plain = MakeJob("j", "n");
  TrainingJobSpec s2 = plain.TypedSpec();
  s2.avoid_nodes = {"a", "b"};
  EXPECT_EQ(build_pod(plain.Obj(), s2, 0, 1)["spec"]["affinity"]["nodeAffinity"]
                     ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
            Json::array({{{"matchFields", {{{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"a", "b"}}}}}}}));
}

TEST(Stragglers, TheCrdOffersTheFields) {
  for (const char* file : {"/charts/weft/crds/weft.dev_trainingjobs.yaml", "/manifests/crd/weft.dev_trainingjobs.yaml"}) {
    YAML::Node crd = YAML::LoadFile(std::string(WEFT_SOURCE_DIR) + file);
    YAML::Node schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
    YAML::Node s = schema["spec"]["properties"]["stragglers"]["properties"];
    ASSERT_TRUE(s) << file;
    EXPECT_EQ(s["threshold"]["default"].as<double>(), StragglerSpec{}.threshold) << file;
    EXPECT_EQ(s["windowSteps"]["default"].as<int>(), StragglerSpec{}.window_steps) << file;
    EXPECT_EQ(s["windowSteps"]["minimum"].as<int>(), 2) << file;
    EXPECT_EQ(s["action"]["enum"].as<std::vector<std::string>>(), (std::vector<std::string>{"none", "replace"}));
    EXPECT_TRUE(schema["status"]["properties"]["stragglers"]["properties"]["avoidedNodes"]) << file;
  }
}

}  // namespace
}  // namespace weft::tj
