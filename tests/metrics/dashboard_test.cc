// The Grafana dashboard shipped in the chart: well-formed for Grafana
// (unique panel ids, every panel on the $datasource variable, namespace/
// trainingjob/rank variables applied by every query, `job` left to the
// scraper) and every metric it queries exists
// in what TrainMetrics exposes. The live test runs the same queries against a
// real Prometheus.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "metrics/metrics_test_util.h"
#include "weft_metrics.h"
#include "metrics/train_metrics.h"

namespace weft::metrics_test {
namespace {

namespace cm = contract::metrics;

using nlohmann::json;

// The exposition after one synced step with two buckets and comm stats, so
// every label-dependent series exists.
std::set<std::string> exposed_names() {
  WorkerConfig cfg;
  auto dp = std::make_shared<StatsOnlyComm>("dp");
  dp->stats_.by_op["all_reduce"] = {1, 0.05, 1024};
  TrainMetrics m(cfg, 0, 2, {dp});
  StepReport r;
  r.step = 1;
  r.step_seconds = 0.1;
  r.sync_group = "dp";
  r.comm_seconds = 0.05;
  r.bucket_seconds = {0.01, 0.02};
  r.bucket_count = 2;
  m.on_step(r);
  return sample_names(prometheus::TextSerializer().Serialize(m.registry()->Collect()));
}

TEST(Dashboard, IsTitledForSyncOverlapAndHasUniquePanelIds) {
  json d = load_dashboard();
  EXPECT_THAT(d.value("title", ""), ::testing::HasSubstr("sync overlap"));
  EXPECT_FALSE(d.value("uid", "").empty());
  std::set<int> ids;
  auto panels = all_panels(d);
  ASSERT_GE(panels.size(), 10u);
  for (const auto& p : panels) {
    ASSERT_TRUE(p.contains("id")) << p.value("title", "?");
    EXPECT_TRUE(ids.insert(p["id"].get<int>()).second) << "duplicate panel id " << p["id"];
    ASSERT_TRUE(p.contains("gridPos")) << p.value("title", "?");
  }
}

TEST(Dashboard, DeclaresDatasourceNamespaceTrainingJobAndRankVariables) {
  json d = load_dashboard();
  std::map<std::string, json> vars;
  for (const auto& v : d["templating"]["list"]) vars[v["name"]] = v;
  ASSERT_TRUE(vars.count("datasource"));
  EXPECT_EQ(vars["datasource"]["type"], "datasource");
  EXPECT_EQ(vars["datasource"]["query"], "prometheus");
  EXPECT_FALSE(vars.count("job")) << "`job` is the scrape job's label; the TrainingJob is `trainingjob`";
  for (const char* name : {"namespace", "trainingjob", "rank"}) {
    ASSERT_TRUE(vars.count(name)) << name;
    EXPECT_EQ(vars[name]["type"], "query") << name;
    EXPECT_EQ(vars[name]["datasource"]["uid"], "${datasource}") << name;
    EXPECT_THAT(vars[name]["query"]["query"].get<std::string>(), ::testing::HasSubstr(cm::kStep.name)) << name;
  }
}

// The TrainingJob is in a label of its own: no query of either dashboard
// selects, groups or joins on `job`, which the scraper sets to its scrape job
// (a TrainingJob called like another scrape job must not share its series).
TEST(Dashboard, NoQueryOfEitherDashboardReadsTheScrapersJobLabel) {
  const std::regex job_label(R"((^|[^a-z_])job\s*(=~|=|!=|!~|[,)]))");
  for (const char* file : {"weft-sync-overlap.json", "weft-operator.json"}) {
    std::ifstream f(std::string(WEFT_SOURCE_DIR) + "/charts/weft/dashboards/" + file);
    const json d = json::parse(f);
    int checked = 0;
    for (const auto& q : dashboard_queries(d)) {
      ++checked;
      EXPECT_FALSE(std::regex_search(q.expr, job_label)) << file << " panel '" << q.panel << "': " << q.expr;
    }
    for (const auto& v : d["templating"]["list"]) {
      if (!v.contains("query") || !v["query"].is_object()) continue;
      const std::string query = v["query"].value("query", "");
      EXPECT_FALSE(std::regex_search(query, job_label)) << file << " variable " << v["name"] << ": " << query;
    }
    EXPECT_GT(checked, 10) << file;
  }
}

TEST(Dashboard, EveryPanelAndQueryUsesTheDatasourceVariable) {
  json d = load_dashboard();
  int with_targets = 0;
  for (const auto& p : all_panels(d)) {
    const std::string title = p.value("title", "?");
    if (p.value("type", "") == "row") {
      EXPECT_FALSE(p.contains("targets")) << title;
      continue;
    }
    ++with_targets;
    EXPECT_EQ(p["datasource"]["uid"], "${datasource}") << title;
    EXPECT_EQ(p["datasource"]["type"], "prometheus") << title;
    ASSERT_FALSE(p.value("targets", json::array()).empty()) << title << " has no query";
    std::set<std::string> refs;
    for (const auto& t : p["targets"]) {
      EXPECT_EQ(t["datasource"]["uid"], "${datasource}") << title;
      EXPECT_TRUE(refs.insert(t.value("refId", "")).second) << title << ": duplicate refId";
    }
  }
  EXPECT_GE(with_targets, 10);
}

TEST(Dashboard, EveryQueryFiltersByNamespaceTrainingJobAndRank) {
  for (const auto& q : dashboard_queries(load_dashboard())) {
    for (const char* sel : {"namespace=~\"$namespace\"", "trainingjob=~\"$trainingjob\"", "rank=~\"$rank\""})
      EXPECT_THAT(q.expr, ::testing::HasSubstr(sel)) << q.panel;
  }
}

TEST(Dashboard, EveryReferencedMetricIsExposed) {
  const auto names = exposed_names();
  json d = load_dashboard();
  std::vector<std::string> exprs;
  for (const auto& q : dashboard_queries(d)) exprs.push_back(q.expr);
  // Annotations keep their PromQL in target (Grafana's AnnotationQuery), the
  // variables in query.query.
  for (const auto& a : d["annotations"]["list"]) exprs.push_back(a["target"].value("expr", ""));
  for (const auto& v : d["templating"]["list"])
    if (v["query"].is_object()) exprs.push_back(v["query"].value("query", ""));
  std::set<std::string> used;
  for (const auto& e : exprs)
    for (const auto& m : referenced_metrics(e)) {
      used.insert(m);
      EXPECT_TRUE(names.count(m)) << m << " is queried by the dashboard but not exposed";
    }
  EXPECT_GE(used.size(), 15u);
}

TEST(Dashboard, ShowsWhatTheIssueAsksFor) {
  json d = load_dashboard();
  std::string titles;
  bool heatmap = false;
  for (const auto& p : all_panels(d)) {
    titles += p.value("title", "") + "\n";
    heatmap |= p.value("type", "") == "heatmap";
  }
  EXPECT_TRUE(heatmap) << "per-bucket reduce latency needs a heatmap";
  for (const char* want : {"Overlap ratio per rank", "Exposed vs hidden", "Bucket size over time",
                           "with tuner decisions", "across tuner decisions",
                           "Step-time breakdown", "Tokens per second", "MFU", "Loss",
                           "ISP prefetch wait", "ZeRO step time"})
    EXPECT_THAT(titles, ::testing::HasSubstr(want));
}

TEST(Dashboard, LivesWhereTheChartShipsIt) {
  // templates/dashboards.yaml ships every dashboards/*.json as a ConfigMap
  // (rendered by helm in chart_dashboard_check.sh).
  const std::string tmpl = std::string(WEFT_SOURCE_DIR) + "/charts/weft/templates/dashboards.yaml";
  EXPECT_THAT(read_file(tmpl), ::testing::HasSubstr("dashboards/*.json")) << tmpl;
  EXPECT_EQ(std::filesystem::path(dashboard_path()).parent_path().filename(), "dashboards");
  EXPECT_EQ(std::filesystem::path(dashboard_path()).extension(), ".json");
}

}  // namespace
}  // namespace weft::metrics_test
