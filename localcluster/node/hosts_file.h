// The names a pod resolves, the way cluster DNS would answer them, written as
// the pod's own hosts file (weft-node bind-mounts it over /etc/hosts in the
// pod's mount namespace, so the pod's resolver is the unmodified libc one).
//
// What resolves, for a pod in namespace NS with cluster domain D:
//  - its own hostname, and `<hostname>.<subdomain>.NS.svc[.D]`;
//  - `<pod-hostname>.<service>.<ns>.svc[.D]` of every pod with a hostname
//    and a subdomain naming a headless Service in its namespace that selects
//    it, while the pod has an IP, is not terminating or finished, and is
//    Ready or the Service publishes not-ready addresses;
//  - `<service>.<ns>.svc[.D]`: the cluster IP, or every selected pod's IP
//    (headless);
//  - the search-domain forms of both inside NS (`<service>`,
//    `<service>.NS`, `<pod-hostname>.<service>`).
// The pod itself counts with `pod_ip`, the address its agent gave it, not
// with the status.podIP of its cached copy: the agent writes that status
// as it starts the container, and its informer sees it back only later, so
// a container that looked up its own Service name at once (a rank 0 on a
// busy host) found nothing there and failed.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace weft::node {

using Json = nlohmann::json;

struct HostsInput {
  const Json* pod = nullptr;        // the pod the file is for
  std::string pod_ip;
  std::vector<std::shared_ptr<const Json>> pods;      // every pod in the cluster (status.podIP read)
  std::vector<std::shared_ptr<const Json>> services;  // every Service
  std::string cluster_domain = "cluster.local";
};

// One "IP name name..." line per address; deterministic order.
std::string render_hosts(const HostsInput& in);

// True when every key/value of `selector` is among `labels`.
bool selector_matches(const Json& selector, const Json& labels);

}  // namespace weft::node
