#include "trainingjob/pod_powers.h"

#include <string>

namespace weft::tj {
namespace {

const char* const kHostPathHint = " (the operator runs without --allow-host-path, chart value operator.allowHostPath)";
const char* const kHostNetworkHint =
    " (the operator runs without --allow-host-network, chart value operator.allowHostNetwork)";
const char* const kServiceAccountHint =
    " (the operator runs without --allow-service-account, chart value operator.allowServiceAccount)";

}  // namespace

std::vector<SpecError> check_pod_powers(const TrainingJobSpec& spec, const PodPowers& allowed) {
  std::vector<SpecError> e;
  const Json& tpl = spec.pod_template;
  if (!tpl.is_object()) return e;
  if (!allowed.service_account) {
    auto sa = tpl.find("serviceAccountName");
    if (sa != tpl.end() && sa->is_string() && !sa->get<std::string>().empty() && sa->get<std::string>() != "default")
      e.push_back({"spec.template.serviceAccountName",
                   "pods may only run as the namespace's default ServiceAccount, not '" + sa->get<std::string>() +
                       "'" + kServiceAccountHint});
  }
  if (!allowed.host_network) {
    auto hn = tpl.find("hostNetwork");
    if (hn != tpl.end() && hn->is_boolean() && hn->get<bool>())
      e.push_back({"spec.template.hostNetwork", std::string("the node's network is refused") + kHostNetworkHint});
  }
  auto volumes = tpl.find("volumes");
  if (volumes == tpl.end() || !volumes->is_array()) return e;
  for (size_t i = 0; i < volumes->size(); ++i) {
    const Json& vol = (*volumes)[i];
    if (!vol.is_object()) continue;
    const std::string path = "spec.template.volumes[" + std::to_string(i) + "]";
    const std::string name = vol.value("name", "");
    if (!allowed.host_path && vol.contains("hostPath"))
      e.push_back({path + ".hostPath", "hostPath volume '" + name + "' is refused" + kHostPathHint});
    if (allowed.service_account) continue;
    auto projected = vol.find("projected");
    if (projected == vol.end() || !projected->is_object()) continue;
    auto sources = projected->find("sources");
    if (sources == projected->end() || !sources->is_array()) continue;
    for (size_t s = 0; s < sources->size(); ++s)
      if ((*sources)[s].is_object() && (*sources)[s].contains("serviceAccountToken"))
        e.push_back({path + ".projected.sources[" + std::to_string(s) + "].serviceAccountToken",
                     "a service-account token in volume '" + name + "' is refused" + kServiceAccountHint});
  }
  return e;
}

}  // namespace weft::tj
