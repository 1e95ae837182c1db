// The simulated ranks of weft-node --simulate-pods (node/sim_ranks.h): who a
// pod's ranks say they are, read from the pod as the operator builds it, and
// a live /metrics on the pod's IP whose step advances.
#include "node/sim_ranks.h"

#include <gtest/gtest.h>

#include <thread>

#include "scrape/http_scraper.h"
#include "scrape/prom_text.h"
#include "support/net.h"
#include "weft_metrics.h"

namespace weft::node {
namespace {
namespace cm = contract::metrics;
using Json = nlohmann::json;

// A pod of a TrainingJob with 4 ranks per pod, pod index 2, attempt 1.
Json operator_pod(int metrics_port) {
  Json env = Json::array();
  for (auto [k, v] : std::vector<std::pair<std::string, std::string>>{{"WORLD_SIZE", "16"},
                                                                      {"LOCAL_WORLD_SIZE", "4"},
                                                                      {"NODE_RANK", "2"},
                                                                      {"RANK", "2"},
                                                                      {"WEFT_ATTEMPT", "1"},
                                                                      {"WEFT_JOB_UID", "uid-7"}})
    env.push_back({{"name", k}, {"value", v}});
  env.push_back({{"name", "WEFT_RDZV_TOKEN"}, {"valueFrom", {{"secretKeyRef", {{"name", "s"}, {"key", "k"}}}}}});
  Json ports = {{{"name", "rendezvous"}, {"containerPort", 29500}}};
  for (int l = 0; l < 4; ++l)
    ports.push_back({{"name", l ? "metrics-" + std::to_string(l) : std::string("metrics")}, {"containerPort", metrics_port + l}});
  return {{"metadata", {{"name", "job-2"}}},
          {"spec", {{"containers", Json::array({{{"name", "worker"}, {"env", env}, {"ports", ports}}})}}}};
}

TEST(SimulatedRanks, APodsRanksAreNamedFromItsEnvironmentAndMetricsPorts) {
  const auto ranks = simulated_ranks_of(operator_pod(9400));
  ASSERT_EQ(ranks.size(), 4u);
  for (int l = 0; l < 4; ++l) {
    EXPECT_EQ(ranks[l].job_uid, "uid-7");
    EXPECT_EQ(ranks[l].attempt, 1);
    EXPECT_EQ(ranks[l].node_rank, 2);
    EXPECT_EQ(ranks[l].local_rank, l);
    EXPECT_EQ(ranks[l].rank, 8 + l);
    EXPECT_EQ(ranks[l].world, 16);
    EXPECT_EQ(ranks[l].port, 9400 + l);
  }
  Json no_metrics = operator_pod(9400);
  no_metrics["spec"]["containers"][0]["ports"] = Json::array({{{"name", "rendezvous"}, {"containerPort", 29500}}});
  EXPECT_TRUE(simulated_ranks_of(no_metrics).empty());
}

TEST(SimulatedRanks, TheExpositionHasEveryFamilyTheOperatorReads) {
  SimulatedRank r{"uid-7", 1, 8, 2, 0, 16, 9400};
  auto parsed = scrape::parse_text(simulated_exposition(r, 42, 0.5));
  ASSERT_TRUE(parsed.ok());
  for (const auto& f : cm::kOperatorReads) {
    const bool present = f.type == cm::Type::Histogram ? parsed.exposition.sum(cm::kStepSecondsCount).has_value()
                                                        : !parsed.exposition.find(f.name).empty();
    EXPECT_TRUE(present) << f.name;
  }
  EXPECT_EQ(parsed.exposition.value(cm::kStep.name, {{cm::kLabelRank, "8"}}), 42);
  const auto info = parsed.exposition.find(cm::kRankInfo.name);
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(*info.front()->label(cm::kLabelInfoJobUid), "uid-7");
  EXPECT_EQ(*info.front()->label(cm::kLabelInfoAttempt), "1");
  EXPECT_EQ(*info.front()->label(cm::kLabelInfoNodeRank), "2");
  EXPECT_EQ(*info.front()->label(cm::kLabelInfoLocalRank), "0");
}

TEST(SimulatedRanks, ServesEachPodsRanksOnItsIpUntilRemoved) {
  SimulatedRanks sim(0.05);
  const int port = weft::testing::free_port_range(4);
  ASSERT_EQ(sim.add("pod-a", "127.0.0.1", simulated_ranks_of(operator_pod(port))), "")
      << "ports " << port << ".." << port + 3;
  EXPECT_EQ(sim.pods(), 1u);
  // The same ports again on the same IP: refused, nothing half-served.
  EXPECT_NE(sim.add("pod-b", "127.0.0.1", simulated_ranks_of(operator_pod(port))), "");
  EXPECT_EQ(sim.pods(), 1u);

  auto step_of = [&](int local) -> double {
    auto got = scrape::scrape({"127.0.0.1", port + local, "/metrics"}, std::chrono::seconds(5));
    EXPECT_TRUE(got.ok()) << got.error;
    return got.metrics.value(cm::kStep.name, {{cm::kLabelRank, std::to_string(8 + local)}}).value_or(-1);
  };
  const double first = step_of(0);
  EXPECT_GE(first, 1);
  EXPECT_GE(step_of(3), 1);
  // The step advances (every 0.05 s; waited for, however slow the host).
  double later = first;
  for (int i = 0; i < 600 && later <= first; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    later = step_of(0);
  }
  EXPECT_GT(later, first);
  const auto ready = scrape::http_get({"127.0.0.1", port, "/ready"}, std::chrono::seconds(5));
  EXPECT_EQ(ready.status, 200) << ready.error;

  sim.remove("pod-a");
  EXPECT_EQ(sim.pods(), 0u);
  EXPECT_FALSE(scrape::scrape({"127.0.0.1", port, "/metrics"}, std::chrono::seconds(5)).ok());
}

}  // namespace
}  // namespace weft::node
