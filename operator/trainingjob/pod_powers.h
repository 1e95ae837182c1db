// What spec.template may give a job's pods beyond the operator's own pod
// baseline. Creating a TrainingJob makes the operator create pods, so a
// template field that would let a pod act as more than a worker must not pass
// through unchecked: a hostPath volume reads or writes the node's files, and a
// ServiceAccount (by name, or a projected token) lets the pod call the API
// server as that account, and hostNetwork puts the pod in the node's network
// (its ports and its traffic). These are refused unless the operator was
// started allowing them (--allow-host-path, --allow-service-account,
// --allow-host-network).
//
// Pure: the spec and the operator's settings in, one SpecError per refused
// field out, each naming the field and the setting that would allow it. The
// reconciler refuses the job with them like any other invalid spec.
#pragma once

#include <vector>

#include "trainingjob/types.h"

namespace weft::tj {

struct PodPowers {
  bool host_path = false;        // spec.template.volumes[].hostPath
  // spec.template.serviceAccountName other than "default", and projected
  // volumes with a serviceAccountToken source.
  bool service_account = false;
  bool host_network = false;     // spec.template.hostNetwork: true
};

std::vector<SpecError> check_pod_powers(const TrainingJobSpec& spec, const PodPowers& allowed);

}  // namespace weft::tj
