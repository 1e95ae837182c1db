// The operator's own dashboard (charts/weft/dashboards/weft-operator.json):
// every panel on the $datasource variable, unique panel ids, every metric it
// queries exposed by the operator (OperatorMetrics and the tuner's
// TunerMetrics after the events that create their series), and every query
// valid PromQL for Prometheus's own parser (promtool check rules, with the
// dashboard's variables substituted). Grafana's schema is checked with the
// other dashboards (metrics.dashboard_grafana_schema).
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "trainingjob/operator_metrics.h"
#include "tuner/tuner_metrics.h"

namespace weft::tj {
namespace {

using nlohmann::json;

json load() {
  std::ifstream f(WEFT_SOURCE_DIR "/charts/weft/dashboards/weft-operator.json");
  return json::parse(f);
}

std::vector<std::pair<std::string, std::string>> queries(const json& d) {  // (panel title, expr)
  std::vector<std::pair<std::string, std::string>> out;
  for (const json& p : d["panels"])
    for (const json& t : p.value("targets", json::array())) out.emplace_back(p["title"], t["expr"]);
  return out;
}

std::set<std::string> exposed_families() {
  prometheus::Registry registry;
  OperatorMetrics m(registry);
  m.observe_reconcile("success", 0.01);
  m.add_restart("Failure");
  m.set_jobs_by_phase({{"Running", 1}});
  m.set_api_requests({{"get", 3}});
  tuner::TunerMetrics t(registry);
  t.trial_completed("ns", "job", 4, 0.2);
  t.set_bucket("ns", "job", 4, true);
  std::set<std::string> names;
  std::istringstream in(prometheus::TextSerializer().Serialize(registry.Collect()));
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') names.insert(line.substr(0, line.find_first_of("{ ")));
  return names;
}

TEST(OperatorDashboard, UniqueIdsAndEveryPanelOnTheDatasourceVariable) {
  const json d = load();
  EXPECT_EQ(d["uid"], "weft-operator");
  std::set<int> ids;
  for (const json& p : d["panels"]) {
    EXPECT_TRUE(ids.insert(p["id"].get<int>()).second) << "duplicate id " << p["id"];
    if (p["type"] == "row") continue;
    EXPECT_EQ(p["datasource"]["uid"], "${datasource}") << p["title"];
    EXPECT_FALSE(p.value("targets", json::array()).empty()) << p["title"];
    for (const json& t : p["targets"]) EXPECT_EQ(t["datasource"]["uid"], "${datasource}") << p["title"];
  }
}

TEST(OperatorDashboard, EveryQueriedMetricIsOneTheOperatorExposes) {
  const std::set<std::string> exposed = exposed_families();
  const std::regex metric("weft_operator_[a-z_]+");
  int seen = 0;
  for (const auto& [panel, expr] : queries(load())) {
    for (auto it = std::sregex_iterator(expr.begin(), expr.end(), metric); it != std::sregex_iterator(); ++it) {
      ++seen;
      EXPECT_TRUE(exposed.count(it->str())) << "panel '" << panel << "' queries " << it->str()
                                            << ", which the operator does not expose";
    }
  }
  EXPECT_GE(seen, 12);
  // Every family the operator exposes is on the dashboard.
  std::string all;
  for (const auto& [panel, expr] : queries(load())) all += expr + "\n";
  for (const std::string& name : exposed) {
    std::string family = std::regex_replace(name, std::regex("_(bucket|sum|count)$"), "");
    EXPECT_NE(all.find(family), std::string::npos) << family << " is exposed but on no panel";
  }
}

TEST(OperatorDashboard, EveryQueryIsValidPromQL) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "no promtool";
  const auto dir = std::filesystem::temp_directory_path() / ("weft-opdash-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream rules(dir / "rules.yml");
  rules << "groups:\n- name: dashboard\n  rules:\n";
  int n = 0;
  for (auto [panel, expr] : queries(load())) {
    for (const auto& [var, value] : std::vector<std::pair<std::string, std::string>>{
             {"$__rate_interval", "1m"}, {"$namespace", ".*"}, {"$job", ".*"}})
      for (size_t at; (at = expr.find(var)) != std::string::npos;) expr.replace(at, var.size(), value);
    rules << "  - record: weft:dashboard_query_" << n++ << "\n    expr: " << json(expr).dump() << "\n";
  }
  rules.close();
  const std::string out = (dir / "out.txt").string();
  const int rc = std::system(("promtool check rules " + (dir / "rules.yml").string() + " > " + out + " 2>&1").c_str());
  std::ifstream f(out);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_EQ(rc, 0) << text.str();
  EXPECT_NE(text.str().find("SUCCESS: " + std::to_string(n) + " rules found"), std::string::npos) << text.str();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weft::tj
