#include "trainingjob/worker_config.h"

#include <yaml-cpp/yaml.h>

namespace weft::tj {
namespace {

using Json = nlohmann::json;

void emit(YAML::Emitter& out, const Json& j) {
  if (j.is_object()) {
    out << YAML::BeginMap;
    for (auto it = j.begin(); it != j.end(); ++it) {
      out << YAML::Key << it.key() << YAML::Value;
      emit(out, it.value());
    }
    out << YAML::EndMap;
  } else if (j.is_array()) {
    out << YAML::BeginSeq;
    for (const auto& e : j) emit(out, e);
    out << YAML::EndSeq;
  } else if (j.is_string()) {
    out << YAML::DoubleQuoted << j.get<std::string>();
  } else if (j.is_null()) {
    out << YAML::Null;
  } else {
    out << j.dump();  // numbers and booleans print the same in YAML
  }
}

}  // namespace

std::string worker_config_yaml(const Json& worker) {
  YAML::Emitter out;
  emit(out, worker.is_object() ? worker : Json::object());
  return std::string(out.c_str()) + "\n";
}

std::map<std::string, std::string> literal_env(const Json& pod_template) {
  std::map<std::string, std::string> env;
  auto list = pod_template.find("env");
  if (list == pod_template.end() || !list->is_array()) return env;
  for (const auto& e : *list)
    if (e.is_object() && e.contains("name") && e["name"].is_string() && e.contains("value") && e["value"].is_string())
      env[e["name"].get<std::string>()] = e["value"].get<std::string>();
  return env;
}

WorkerRead read_worker_config(const Json& worker, const Json& pod_template) {
  WorkerRead r;
  if (!worker.is_null() && !worker.is_object()) {
    r.error_field = "spec.worker";
    r.error = "must be a mapping of the worker's config sections, got " + worker.dump();
    return r;
  }
  try {
    ConfigElsewhere read = read_config_elsewhere(worker_config_yaml(worker), "spec.worker", literal_env(pod_template));
    r.config = std::move(read.cfg);
    r.shape_known = read.shape_known;
  } catch (const EnvConfigError& e) {
    r.error_field = "spec.template.env";
    r.error = e.what();  // names the variable: "WEFT_DEVICE=tpu: device: ..."
  } catch (const ConfigError& e) {
    // The YAML is rendered from the spec's JSON: its line numbers mean
    // nothing to the user, the field path does.
    r.error_field = e.path.empty() ? "spec.worker" : "spec.worker." + e.path;
    r.error = e.problem.empty() ? e.what() : e.problem;
  }
  return r;
}

}  // namespace weft::tj
