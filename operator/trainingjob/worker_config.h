// spec.worker as the ranks will read it. The operator does not parse the
// worker's config with a reader of its own: it renders the config.yaml the
// job's ConfigMap carries and reads those bytes with the worker's config unit
// (worker/config/config.h: parse_config, the WEFT_* overrides of the pod
// template's literal env, validate, resolve), so a field added to the
// worker's schema is read the same way by both programs, and a config the
// worker would refuse is refused before any pod starts, with the worker's
// words.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>

#include "config/config.h"

namespace weft::tj {

// spec.worker as the YAML text of the ConfigMap's config.yaml (the file the
// ranks read).
std::string worker_config_yaml(const nlohmann::json& worker);

// The WEFT_* and other variables spec.template.env sets to a literal value
// (name -> value, the last entry winning, as in a container's env); a value
// taken from a reference (valueFrom) is unknown here and left out.
std::map<std::string, std::string> literal_env(const nlohmann::json& pod_template);

struct WorkerRead {
  // The config the ranks will run (resolved), when the worker accepts it.
  std::optional<WorkerConfig> config;
  // false: init_from names the model's directory inside the pod; the fields
  // are read and typed, the rules that involve the model's shape are the
  // worker's at start, and `config` is not resolved.
  bool shape_known = true;
  // Why the worker would refuse it: the field ("spec.worker.parallel.sp",
  // "spec.template.env" for an override) and the worker's message.
  std::string error_field, error;
};
WorkerRead read_worker_config(const nlohmann::json& worker, const nlohmann::json& pod_template);

}  // namespace weft::tj
