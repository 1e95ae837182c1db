// The CRD's cross-field (CEL) rules as weft-operator enforces them itself, for
// API servers that do not: the same table of cases the API server is checked
// with (tests/kube/testdata/cel-cases.yaml, tests/kube/cel_rules_check.sh), so
// the two enforcers cannot drift apart.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <functional>
#include <set>
#include <string>

#include "support/yaml_json.h"
#include "trainingjob/types.h"

namespace weft::tj {
namespace {

using Json = nlohmann::json;

Json to_json(const YAML::Node& n) { return test::yaml_to_json(n); }

const YAML::Node& table() {
  static const YAML::Node t = YAML::LoadFile(WEFT_SOURCE_DIR "/tests/kube/testdata/cel-cases.yaml");
  return t;
}

TEST(CelCases, OperatorAgreesWithTheTable) {
  const Json base = to_json(table()["base"]);
  int accepts = 0, rejects = 0;
  for (const auto& c : table()["cases"]) {
    const std::string name = c["name"].as<std::string>();
    SCOPED_TRACE(name);
    Json spec = base;
    spec.merge_patch(to_json(c["spec"]));  // no nulls in the table: a deep merge
    std::vector<SpecError> errors;
    const TrainingJobSpec parsed = parse_spec(spec, &errors);
    for (auto& e : validate(parsed)) errors.push_back(e);
    const std::string verdict = c["verdict"].as<std::string>();
    if (verdict == "accept") {
      ++accepts;
      EXPECT_TRUE(errors.empty()) << spec.dump() << ": " << describe(errors);
    } else {
      ASSERT_EQ(verdict, "reject");
      ++rejects;
      ASSERT_TRUE(c["operatorField"]) << "a reject case names the operator's field";
      ASSERT_TRUE(c["message"]) << "a reject case names the rule's message";
      const std::string field = c["operatorField"].as<std::string>();
      std::set<std::string> fields;
      for (const auto& e : errors) fields.insert(e.field);
      EXPECT_TRUE(fields.count(field)) << spec.dump() << ": want an error on " << field << ", got '"
                                       << describe(errors) << "'";
    }
  }
  EXPECT_GE(accepts, 10);
  EXPECT_GE(rejects, 10);
}

// Every rule of the CRD has cases (by message), and every message in the
// table is one of the CRD's rules: a rule added to the CRD needs cases here.
TEST(CelCases, EveryRuleOfTheCrdHasCases) {
  std::set<std::string> rules;
  std::function<void(const YAML::Node&)> walk = [&](const YAML::Node& n) {
    if (n.IsMap()) {
      for (const auto& kv : n) {
        if (kv.first.as<std::string>() == "x-kubernetes-validations")
          for (const auto& r : kv.second) rules.insert(r["message"].as<std::string>());
        walk(kv.second);
      }
    } else if (n.IsSequence()) {
      for (const auto& e : n) walk(e);
    }
  };
  walk(YAML::LoadFile(WEFT_SOURCE_DIR "/manifests/crd/weft.dev_trainingjobs.yaml"));
  ASSERT_GE(rules.size(), 9u);
  std::set<std::string> in_table;
  for (const auto& c : table()["cases"])
    if (c["message"]) in_table.insert(c["message"].as<std::string>());
  for (const auto& r : rules) EXPECT_TRUE(in_table.count(r)) << "no reject case for the CRD rule '" << r << "'";
  for (const auto& m : in_table) EXPECT_TRUE(rules.count(m)) << "'" << m << "' is no rule's message in the CRD";
}

}  // namespace
}  // namespace weft::tj
