#include "node/hosts_file.h"

#include <map>
#include <set>

namespace weft::node {
namespace {

std::string str(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool serving(const Json& pod) {
  const Json& meta = pod["metadata"];
  if (meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null()) return false;
  if (!pod.contains("status")) return false;
  const std::string phase = str(pod["status"], "phase");
  return !str(pod["status"], "podIP").empty() && phase != "Succeeded" && phase != "Failed";
}

// serving() for a pod whose address is known without its status.
bool serving_if_addressed(const Json& pod) {
  const Json& meta = pod["metadata"];
  if (meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null()) return false;
  const std::string phase = pod.contains("status") ? str(pod["status"], "phase") : "";
  return phase != "Succeeded" && phase != "Failed";
}

bool ready(const Json& pod) {
  if (!pod.contains("status") || !pod["status"].contains("conditions")) return false;
  for (const auto& c : pod["status"]["conditions"])
    if (str(c, "type") == "Ready") return str(c, "status") == "True";
  return false;
}

}  // namespace

bool selector_matches(const Json& selector, const Json& labels) {
  if (!selector.is_object() || selector.empty()) return false;  // a Service without selector has no pods
  for (auto it = selector.begin(); it != selector.end(); ++it) {
    if (!labels.is_object() || !labels.contains(it.key()) || labels[it.key()] != it.value()) return false;
  }
  return true;
}

std::string render_hosts(const HostsInput& in) {
  const Json& self = *in.pod;
  const std::string ns = str(self["metadata"], "namespace");
  const std::string own_host =
      str(self["spec"], "hostname").empty() ? str(self["metadata"], "name") : str(self["spec"], "hostname");
  const std::string own_sub = str(self["spec"], "subdomain");
  // ip -> names, names kept in insertion order without duplicates.
  std::map<std::string, std::vector<std::string>> by_ip;
  std::set<std::pair<std::string, std::string>> seen;
  auto add = [&](const std::string& ip, const std::string& name) {
    if (ip.empty() || !seen.insert({ip, name}).second) return;
    by_ip[ip].push_back(name);
  };
  // Names with and without the cluster domain, plus the search-path forms
  // inside the pod's own namespace (`short` is what a search domain expands).
  auto add_service_name = [&](const std::string& ip, const std::string& prefix, const std::string& svc_ns) {
    add(ip, prefix + "." + svc_ns + ".svc." + in.cluster_domain);
    add(ip, prefix + "." + svc_ns + ".svc");
    if (svc_ns == ns) add(ip, prefix);
    add(ip, prefix + "." + svc_ns);
  };

  if (!own_sub.empty()) add(in.pod_ip, own_host + "." + own_sub + "." + ns + ".svc." + in.cluster_domain);
  add(in.pod_ip, own_host);

  for (const auto& svc_ptr : in.services) {
    const Json& svc = *svc_ptr;
    const std::string svc_name = str(svc["metadata"], "name"), svc_ns = str(svc["metadata"], "namespace");
    const Json& sspec = svc.contains("spec") ? svc["spec"] : Json::object();
    const std::string cluster_ip = str(sspec, "clusterIP");
    const bool headless = cluster_ip == "None";
    if (!headless) {
      if (!cluster_ip.empty()) add_service_name(cluster_ip, svc_name, svc_ns);
      continue;
    }
    const bool not_ready_ok = sspec.value("publishNotReadyAddresses", false);
    const Json selector = sspec.value("selector", Json::object());
    auto add_member = [&](const Json& p, const std::string& ip) {
      const std::string host = str(p["spec"], "hostname");
      if (!host.empty() && str(p["spec"], "subdomain") == svc_name) add_service_name(ip, host + "." + svc_name, svc_ns);
      add_service_name(ip, svc_name, svc_ns);
    };
    for (const auto& pod_ptr : in.pods) {
      const Json& p = *pod_ptr;
      const Json& pmeta = p["metadata"];
      if (str(pmeta, "namespace") == ns && str(pmeta, "name") == str(self["metadata"], "name")) continue;  // below
      if (str(pmeta, "namespace") != svc_ns || !serving(p) || !(not_ready_ok || ready(p))) continue;
      if (!selector_matches(selector, pmeta.value("labels", Json::object()))) continue;
      add_member(p, str(p["status"], "podIP"));
    }
    // The pod itself, with the address it was given (see the header).
    if (svc_ns == ns && !in.pod_ip.empty() && serving_if_addressed(self) && (not_ready_ok || ready(self)) &&
        selector_matches(selector, self["metadata"].value("labels", Json::object())))
      add_member(self, in.pod_ip);
  }

  std::string out = "# written by weft-node: cluster names as cluster DNS would answer them\n";
  out += "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
  for (const auto& [ip, names] : by_ip) {
    out += ip;
    for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "\t" : " ") + names[i];
    out += "\n";
  }
  return out;
}

}  // namespace weft::node
