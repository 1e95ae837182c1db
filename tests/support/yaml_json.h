// YAML as kubectl turns it into the JSON the API server stores, for tests that
// hand the operator's readers what a manifest becomes: quoted scalars are
// strings; plain ones are integers, floats, booleans or strings, in that
// order; ~ and empty values null.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace weft::test {

inline nlohmann::json yaml_to_json(const YAML::Node& n) {
  if (n.IsMap()) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& kv : n) j[kv.first.as<std::string>()] = yaml_to_json(kv.second);
    return j;
  }
  if (n.IsSequence()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& e : n) j.push_back(yaml_to_json(e));
    return j;
  }
  if (n.IsNull()) return nullptr;
  const std::string s = n.Scalar();
  if (n.Tag() == "!") return s;
  int64_t i = 0;
  double d = 0;
  bool b = false;
  if (YAML::convert<int64_t>::decode(n, i)) return i;
  if (YAML::convert<double>::decode(n, d)) return d;
  if (YAML::convert<bool>::decode(n, b)) return b;
  return s;
}

}  // namespace weft::test
