// The API resources weft-operator touches, and how their REST paths are
// built. A Resource is a value: group/version/plural plus whether it lives in
// a namespace.
#pragma once

#include <string>

namespace weft::kube {

struct Resource {
  std::string group;    // "" = core
  std::string version;  // "v1"
  std::string plural;   // "pods"
  std::string kind;     // "Pod"
  bool namespaced = true;

  std::string api_version() const { return group.empty() ? version : group + "/" + version; }
  // /api/v1[/namespaces/NS]/PLURAL[/NAME][/SUB]; an empty ns on a namespaced
  // resource means "all namespaces" (list and watch only).
  std::string path(const std::string& ns, const std::string& name = "", const std::string& sub = "") const {
    std::string p = group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
    if (namespaced && !ns.empty()) p += "/namespaces/" + ns;
    p += "/" + plural;
    if (!name.empty()) p += "/" + name;
    if (!sub.empty()) p += "/" + sub;
    return p;
  }
};

inline const Resource kPods{"", "v1", "pods", "Pod"};
inline const Resource kServices{"", "v1", "services", "Service"};
inline const Resource kConfigMaps{"", "v1", "configmaps", "ConfigMap"};
inline const Resource kSecrets{"", "v1", "secrets", "Secret"};
inline const Resource kEvents{"", "v1", "events", "Event"};
inline const Resource kNamespaces{"", "v1", "namespaces", "Namespace", false};
inline const Resource kNodes{"", "v1", "nodes", "Node", false};
inline const Resource kLeases{"coordination.k8s.io", "v1", "leases", "Lease"};
inline const Resource kNetworkPolicies{"networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"};
inline const Resource kTrainingJobs{"weft.dev", "v1alpha1", "trainingjobs", "TrainingJob"};
// Gang scheduling (spec.scheduling): the PodGroups of scheduler-plugins'
// coscheduling and of Volcano, served only where those CRDs are installed.
inline const Resource kPodGroups{"scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup"};
inline const Resource kVolcanoPodGroups{"scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup"};
// Kueue (--kueue): the Workload the operator owns for a queued job, and the
// cluster-scoped objects its admission names.
inline const Resource kWorkloads{"kueue.x-k8s.io", "v1beta2", "workloads", "Workload"};
inline const Resource kResourceFlavors{"kueue.x-k8s.io", "v1beta2", "resourceflavors", "ResourceFlavor", false};
inline const Resource kWorkloadPriorityClasses{"kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses",
                                               "WorkloadPriorityClass", false};

}  // namespace weft::kube
