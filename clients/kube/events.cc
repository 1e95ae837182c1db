#include "kube/events.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>
#include <random>

namespace weft::kube {

void EventRecorder::record(const Json& object, const std::string& type, const std::string& reason,
                           const std::string& message) {
  const Json& meta = object["metadata"];
  const std::string ns = meta.value("namespace", "default");
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char suffix[20];
  std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(rng()));
  Json ev = {{"apiVersion", "v1"},
             {"kind", "Event"},
             {"metadata", {{"name", meta.value("name", "") + "." + suffix}, {"namespace", ns}}},
             {"involvedObject",
              {{"apiVersion", object.value("apiVersion", "")},
               {"kind", object.value("kind", "")},
               {"name", meta.value("name", "")},
               {"namespace", ns},
               {"uid", meta.value("uid", "")},
               {"resourceVersion", meta.value("resourceVersion", "")}}},
             {"type", type},
             {"reason", reason},
             {"message", message},
             {"source", {{"component", component_}}},
             {"firstTimestamp", ts},
             {"lastTimestamp", ts},
             {"count", 1}};
  auto res = api_.create(kEvents, ns, ev);
  if (!res) spdlog::warn("event {} on {}/{} not recorded: {}", reason, ns, meta.value("name", ""), res.error().message);
}

}  // namespace weft::kube
