#include "trainingjob/gang.h"

namespace weft::tj {

RankState observe_pod(const nlohmann::json& pod, const std::string& container) {
  RankState s;
  const auto& meta = pod["metadata"];
  if (meta.contains("labels")) {
    auto it = meta["labels"].find("weft.dev/rank");
    if (it != meta["labels"].end() && it->is_string()) s.rank = std::atoi(it->get<std::string>().c_str());
  }
  s.terminating = meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null();
  if (!pod.contains("status") || !pod["status"].is_object()) return s;
  const auto& st = pod["status"];
  s.phase = st.value("phase", "Pending");
  s.reason = st.value("reason", "");
  if (auto c = st.find("conditions"); c != st.end() && c->is_array())
    for (const auto& cond : *c)
      if (cond.value("type", "") == "Ready") s.ready = cond.value("status", "") == "True";
  if (auto cs = st.find("containerStatuses"); cs != st.end() && cs->is_array())
    for (const auto& c : *cs) {
      if (c.value("name", "") != container) continue;
      if (c.contains("state") && c["state"].contains("terminated"))
        s.exit_code = c["state"]["terminated"].value("exitCode", -1);
    }
  return s;
}

}  // namespace weft::tj
