// The ranks' figures reach status through the scrape poller: an in-process
// operator whose poller reads a fake scrape function (no rank process, no
// network) writes rank 0's numbers to status.progress and feeds the tuner's
// rounds to status.tuning.
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "canned_exposition.h"
#include "integration/harness.h"
#include "scrape/prom_text.h"
#include "trainingjob/constants.h"
#include "weft_contract.h"

namespace weft::it {
namespace {

namespace cm = contract::metrics;

// Whose rank each fake pod IP serves (contract::metrics::kRankInfo), from the
// pod's own launch environment: the poller uses a scrape only when it matches.
class Identities {
 public:
  void add(const std::string& ip, const Json& pod) {
    std::lock_guard lock(mu_);
    const std::string idx = pod["metadata"]["labels"][tj::kLabelRank].get<std::string>();
    info_[ip] = weft::testing::rank_info_sample(env_value(pod, contract::kEnvJobUid),
                                                std::stoi(env_value(pod, contract::kEnvAttempt)), std::stoi(idx));
  }
  std::string of(const std::string& ip) {
    std::lock_guard lock(mu_);
    return info_[ip];
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> info_;
};
Identities identities;

// Pod IP 10.1.0.<rank> serves rank <rank>: every scrape is one more step of
// 100 ms on the job's 4 MiB cap; rank 0 also reports its loss.
class FakeRanks {
 public:
  tj::ScrapePoller::ScrapeFn fn() {
    return [this](const scrape::Endpoint& ep, std::chrono::milliseconds) {
      std::lock_guard lock(mu_);
      const std::string rank = ep.host.substr(ep.host.rfind('.') + 1);
      const int step = ++steps_[ep.host];
      const auto l = weft::testing::rank_label(std::stoi(rank));
      using weft::testing::sample;
      scrape::ScrapeResult r;
      r.metrics = scrape::parse_text(sample(cm::kStep, std::to_string(step), l) + sample(cm::kLoss, "2.5", l) +
                                     sample(cm::kBucketCapBytes, "4194304", l) +
                                     sample(cm::kStepSecondsSum, std::to_string(0.1 * step), l) +
                                     sample(cm::kStepSecondsCount, std::to_string(step), l) +
                                     sample(cm::kExposedCommLastStep, "0.0125", l) + identities.of(ep.host))
                      .exposition;
      return r;
    };
  }
  int scrapes(const std::string& host) {
    std::lock_guard lock(mu_);
    return steps_[host];
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> steps_;
};

class Poller : public ::testing::Test {
 protected:
  Poller() : ns_("it-poller") {}
  void start(tj::ScrapePoller::ScrapeFn scrape) {
    op_ = std::make_unique<InProcessOperator>(tj::ControllerOptions{.ns = ns_.name(),
                                                                    .workers = 2,
                                                                    .resync = 30s,
                                                                    .progress = 1s,
                                                                    .scrape = std::move(scrape)});
  }
  void TearDown() override { op_.reset(); }
  // Every pod of the job Running and Ready, at 10.1.0.<rank>.
  void run_pods(const std::string& job) {
    set_all_running(ns_.name(), job);
    for (const auto& p : job_pods(ns_.name(), job)) {
      const std::string ip = "10.1.0." + p["metadata"]["labels"][tj::kLabelRank].get<std::string>();
      identities.add(ip, p);
      auto r = admin_api().merge_patch(kube::kPods, ns_.name(), p["metadata"]["name"],
                                       {{"status", {{"podIP", ip}}}}, true);
      ASSERT_TRUE(r.ok()) << r.error().message;
    }
  }
  TestNamespace ns_;
  std::unique_ptr<InProcessOperator> op_;
};

TEST_F(Poller, RankZerosFiguresReachStatusProgress) {
  FakeRanks ranks;
  start(ranks.fn());
  create_job(ns_.name(), job_json("prog", 2));
  ASSERT_TRUE(eventually([&] { return job_pods(ns_.name(), "prog").size() == 2; }));
  run_pods("prog");
  ASSERT_TRUE(eventually([&] { return phase_of(ns_.name(), "prog") == tj::kPhaseRunning; }));
  // --progress-seconds 1: the step climbs as the poller scrapes rank 0 again.
  long first = 0;
  ASSERT_TRUE(eventually([&] {
    Json p = status_of(ns_.name(), "prog").value("progress", Json::object());
    first = p.value("step", 0L);
    // The sync figures too: the last step's exposed comm and the bucket cap in force.
    return first > 0 && p.value("loss", 0.0) == 2.5 && p.contains("updatedAt") &&
           p.value("exposedCommSeconds", 0.0) == 0.0125 && p.value("bucketCapMB", 0.0) == 4;
  })) << status_of(ns_.name(), "prog").dump();
  ASSERT_TRUE(eventually([&] {
    return status_of(ns_.name(), "prog").value("progress", Json::object()).value("step", 0L) >
           first;
  })) << status_of(ns_.name(), "prog").dump();
  EXPECT_EQ(ranks.scrapes("10.1.0.1"), 0) << "only rank 0 is scraped for progress";
}

TEST_F(Poller, TheTunersRoundsComeFromThePoller) {
  FakeRanks ranks;
  start(ranks.fn());
  Json job = job_json("tune", 2);
  job["spec"]["tuning"] = {
      {"bucketSize", {{"enabled", true}, {"minMB", 1}, {"maxMB", 8}, {"stepsPerTrial", 1000}}}};
  create_job(ns_.name(), job);
  ASSERT_TRUE(eventually([&] { return job_pods(ns_.name(), "tune").size() == 2; }));
  run_pods("tune");
  // The first trial (the job's 4 MiB) counts the steps every rank ran in
  // its window, round after round.
  ASSERT_TRUE(eventually(
      [&] {
        Json t = status_of(ns_.name(), "tune").value("tuning", Json::object());
        return t.value("state", "") == "Searching" && t.contains("trials") &&
               t["trials"].size() == 1 && t["trials"][0].value("bucketMB", 0.0) == 4 &&
               t["trials"][0].value("steps", 0L) >= 2;
      },
      60s))
      << status_of(ns_.name(), "tune").dump();
  EXPECT_GT(ranks.scrapes("10.1.0.1"), 0);
}

// spec.stragglers: every rank's pace comes from the poller; rank 1 computes
// twice as long a step as the others, and the reconciler names it.
TEST_F(Poller, AStragglerIsNamedFromEveryRanksPace) {
  std::mutex mu;
  std::map<std::string, int> steps;
  start([&](const scrape::Endpoint& ep, std::chrono::milliseconds) {
    std::lock_guard lock(mu);
    const std::string rank = ep.host.substr(ep.host.rfind('.') + 1);
    const int step = steps[ep.host] += 10;
    const double compute = (rank == "1" ? 0.2 : 0.1) * step;
    const auto l = weft::testing::rank_label(std::stoi(rank));
    using weft::testing::sample;
    scrape::ScrapeResult r;
    r.metrics = scrape::parse_text(sample(cm::kStep, std::to_string(step), l) + sample(cm::kLoss, "2.5", l) +
                                   sample(cm::kComputeSeconds, std::to_string(compute), l) +
                                   sample(cm::kWaitSeconds, std::to_string(0.2 * step - compute), l) +
                                   identities.of(ep.host))
                    .exposition;
    return r;
  });
  Json job = job_json("slow", 3);
  job["spec"]["stragglers"] = {{"windowSteps", 10}};
  create_job(ns_.name(), job);
  ASSERT_TRUE(eventually([&] { return job_pods(ns_.name(), "slow").size() == 3; }));
  run_pods("slow");
  auto straggler = [&] {
    for (const auto& c : status_of(ns_.name(), "slow").value("conditions", Json::array()))
      if (c["type"] == tj::kCondStraggler) return c;
    return Json::object();
  };
  ASSERT_TRUE(eventually([&] { return straggler().value("status", "") == "True"; }, 60s))
      << status_of(ns_.name(), "slow").dump();
  const Json c = straggler();
  EXPECT_EQ(c["reason"], tj::kReasonSlowRank);
  EXPECT_EQ(c["message"].get<std::string>().rfind("pod slow-1 (rank 1) on node ", 0), 0u) << c.dump();
  EXPECT_NE(c["message"].get<std::string>().find("2.00x the gang's median 0.100 s"), std::string::npos) << c.dump();
  EXPECT_NE(op_->metrics_text().find("weft_operator_stragglers_total{action=\"none\"} 1"), std::string::npos)
      << op_->metrics_text();
  // The event is written after the status that carries the condition
  // (finish() writes the status first): wait for it, then let more rounds
  // pass, which must not name the rank again.
  auto named = [&] {
    auto events = admin_api().list(kube::kEvents, ns_.name());
    int n = 0;
    if (events.ok())
      for (const auto& e : events->items) n += e.value("reason", "") == tj::kReasonSlowRank;
    return n;
  };
  ASSERT_TRUE(eventually([&] { return named() >= 1; }, 30s)) << "no SlowRank event";
  std::this_thread::sleep_for(3s);
  EXPECT_EQ(named(), 1) << "named once, not at every round";
}

}  // namespace
}  // namespace weft::it
