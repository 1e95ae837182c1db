#include "trainingjob/gang.h"

namespace weft::tj {

namespace {

// A string member of an object, "" when absent or of another type (a
// kubelet's status is read, never trusted).
std::string text(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

const nlohmann::json* member(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it != obj.end() && it->is_object() ? &*it : nullptr;
}

int exit_code_of(const nlohmann::json& terminated) {
  auto it = terminated.find("exitCode");
  return it != terminated.end() && it->is_number_integer() ? it->get<int>() : -1;
}

}  // namespace

Placement placement_of(const GangObservation& gang) {
  Placement p;
  for (const RankState& r : gang.ranks) {
    if (r.terminating) continue;
    if (r.scheduled) {
      ++p.placed;
      continue;
    }
    ++p.waiting;
    if (r.unschedulable.empty()) continue;
    if (p.held++ == 0) {
      p.first_held_rank = r.rank;
      p.first_held_reason = r.unschedulable;
    }
  }
  return p;
}

RankState observe_pod(const nlohmann::json& pod, const std::string& container) {
  RankState s;
  const auto& meta = pod["metadata"];
  if (meta.contains("labels")) {
    auto it = meta["labels"].find("weft.dev/rank");
    if (it != meta["labels"].end() && it->is_string()) s.rank = std::atoi(it->get<std::string>().c_str());
  }
  s.terminating = meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null();
  s.pod = text(meta, "name");
  s.created_at = text(meta, "creationTimestamp");
  if (pod.contains("spec") && pod["spec"].is_object()) {
    auto n = pod["spec"].find("nodeName");
    s.scheduled = n != pod["spec"].end() && n->is_string() && !n->get<std::string>().empty();
    if (auto cs = pod["spec"].find("containers"); cs != pod["spec"].end() && cs->is_array())
      for (const auto& c : *cs)
        if (c.is_object() && text(c, "name") == container && c.contains("resources") && c["resources"].is_object() &&
            c["resources"].contains("limits") && c["resources"]["limits"].is_object())
          s.memory_limit = text(c["resources"]["limits"], "memory");
  }
  if (!pod.contains("status") || !pod["status"].is_object()) return s;
  const auto& st = pod["status"];
  s.phase = st.value("phase", "Pending");
  if (s.phase != "Pending") s.scheduled = true;
  s.reason = st.value("reason", "");
  if (auto c = st.find("conditions"); c != st.end() && c->is_array())
    for (const auto& cond : *c) {
      if (!cond.is_object()) continue;
      const std::string type = cond.value("type", ""), status = cond.value("status", "");
      if (type == "Ready") s.ready = status == "True";
      // Set by the API server, scheduler or kubelet before they delete or
      // kill a pod for reasons outside it (eviction, preemption, node loss).
      if (type == "DisruptionTarget" && status == "True") s.disruption = cond.value("reason", "DisruptionTarget");
      // The scheduler's verdict: bound, or why not (a gang scheduler says
      // so on the pods it holds back).
      if (type == "PodScheduled" && status == "True") {
        s.scheduled = true;
        s.scheduled_at = text(cond, "lastTransitionTime");
      }
      if (type == "PodScheduled" && status == "False") {
        s.unschedulable = cond.value("message", "");
        if (s.unschedulable.empty()) s.unschedulable = cond.value("reason", "Unschedulable");
      }
    }
  if (auto cs = st.find("containerStatuses"); cs != st.end() && cs->is_array())
    for (const auto& c : *cs) {
      if (!c.is_object() || text(c, "name") != container) continue;
      s.container_reported = true;
      const nlohmann::json* state = member(c, "state");
      if (const nlohmann::json* t = state ? member(*state, "terminated") : nullptr) {
        s.exit_code = exit_code_of(*t);
        s.container_reason = text(*t, "reason");
        s.message = text(*t, "message");
      }
      if (const nlohmann::json* w = state ? member(*state, "waiting") : nullptr) {
        s.waiting_reason = text(*w, "reason");
        s.waiting_message = text(*w, "message");
      }
      const nlohmann::json* last = member(c, "lastState");
      if (const nlohmann::json* t = last ? member(*last, "terminated") : nullptr) {
        s.last_exit_code = exit_code_of(*t);
        s.last_reason = text(*t, "reason");
        // A pod that ended with its container waiting (it was restarted
        // once, or the kubelet lost track of it) ended with this exit.
        if (!s.exit_code && (s.phase == "Failed" || s.phase == "Succeeded")) {
          s.exit_code = s.last_exit_code;
          s.container_reason = s.last_reason;
          s.message = text(*t, "message");
        }
      }
    }
  return s;
}

std::string last_message_line(const std::string& message, size_t max_chars) {
  size_t end = message.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  size_t begin = message.rfind('\n', end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  std::string line = message.substr(begin, end + 1 - begin);
  if (line.size() > max_chars) line = line.substr(0, max_chars) + "...";
  return line;
}

}  // namespace weft::tj
