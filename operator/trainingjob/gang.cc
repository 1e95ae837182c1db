#include "trainingjob/gang.h"

namespace weft::tj {

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
  if (pod.contains("spec") && pod["spec"].is_object()) {
    auto n = pod["spec"].find("nodeName");
    s.scheduled = n != pod["spec"].end() && n->is_string() && !n->get<std::string>().empty();
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
      if (type == "PodScheduled" && status == "True") s.scheduled = true;
      if (type == "PodScheduled" && status == "False") {
        s.unschedulable = cond.value("message", "");
        if (s.unschedulable.empty()) s.unschedulable = cond.value("reason", "Unschedulable");
      }
    }
  if (auto cs = st.find("containerStatuses"); cs != st.end() && cs->is_array())
    for (const auto& c : *cs) {
      if (c.value("name", "") != container) continue;
      if (c.contains("state") && c["state"].contains("terminated")) {
        const auto& t = c["state"]["terminated"];
        s.exit_code = t.value("exitCode", -1);
        s.container_reason = t.value("reason", "");
        if (auto m = t.find("message"); m != t.end() && m->is_string()) s.message = m->get<std::string>();
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
