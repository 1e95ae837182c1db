// EventRecorder: writes core/v1 Events about an object (what `kubectl
// describe` shows). Best effort: a failed event write is logged, never
// fails a reconcile.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "kube/kube_api.h"

namespace weft::kube {

class EventRecorder {
 public:
  EventRecorder(KubeApi& api, std::string component) : api_(api), component_(std::move(component)) {}
  // type: "Normal" or "Warning"; reason: CamelCase from constants.h.
  void record(const Json& object, const std::string& type, const std::string& reason, const std::string& message);

 private:
  KubeApi& api_;
  std::string component_;
};

}  // namespace weft::kube
