// Builders of the child objects of one TrainingJob (pure: job JSON in,
// object JSON out). Names: Service `<job>`, ConfigMap `<job>-config`,
// Secret `<job>-rdzv-<job uid>`, NetworkPolicy `<job>`, pods `<job>-<index>`
// with hostname `<job>-<index>` and subdomain `<job>`, so rank 0 (in pod 0)
// resolves as `<job>-0.<job>.<ns>.svc`. With spec.procsPerPod P, pod i runs
// ranks i·P .. i·P+P-1 through weft-run; with P = 1 pod i is rank i. Every child carries the job's labels and a
// controller owner reference, so deleting the job garbage-collects them.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "kube/resource.h"
#include "trainingjob/types.h"

namespace weft::tj {

using Json = nlohmann::json;

std::string service_name(const std::string& job);
std::string configmap_name(const std::string& job);
// The job's uid is part of the name: the operator only creates the Secret
// (it may not read Secrets), so AlreadyExists must mean "this job's own",
// never a same-named job's that the garbage collector has yet to delete.
std::string secret_name(const std::string& job, const std::string& uid);
std::string network_policy_name(const std::string& job);
std::string podgroup_name(const std::string& job);
std::string pod_name(const std::string& job, int index);
std::string master_addr(const std::string& job, const std::string& ns);

Json owner_reference(const Json& job);
Json child_labels(const std::string& job);

Json build_service(const Json& job, const TrainingJobSpec& spec);
// The worker config (contract::kConfigKey), which carries the spec's bucket
// cap, and the bucket cap key (contract::kBucketCapKey), empty at creation:
// only the tuner writes it.
Json build_configmap(const Json& job, const TrainingJobSpec& spec);
Json build_secret(const Json& job, const std::string& token);
// Ingress to the job's pods: any port from the same job's pods (rendezvous on
// masterPort, Gloo/NCCL on ephemeral ports), and the metrics port from
// `metrics_from` (NetworkPolicyPeers, the operator's own pods among them);
// an empty or null `metrics_from` admits the metrics port from anywhere.
Json build_network_policy(const Json& job, const TrainingJobSpec& spec, const Json& metrics_from);
// The gang's PodGroup (spec.scheduling.gang: podgroup), of the provider's
// API: minMember = the pods; minResources = the pods' requests (limits where
// a request is not set, as the API server defaults them) times the pods, so
// a queue admits the whole gang or nothing; scheduler-plugins'
// scheduleTimeoutSeconds or Volcano's queue when the spec sets them.
Json build_podgroup(const Json& job, const TrainingJobSpec& spec);
// The PodGroup's resource (kube/resource.h) for the spec's provider.
const kube::Resource& podgroup_resource(const TrainingJobSpec& spec);
// Pod `index` (label weft.dev/rank) of the gang's attempt `attempt`.
Json build_pod(const Json& job, const TrainingJobSpec& spec, int index, int attempt);

// Stable (FNV-1a 64) hash of every spec field that shapes a pod; stored in
// the pod annotation weft.dev/spec-hash.
std::string pod_spec_hash(const TrainingJobSpec& spec);
std::string random_token();                          // 32 random bytes, hex

// Env names the operator sets (contract::kOperatorEnv); spec.template.env may
// not override them.
bool is_contract_env(const std::string& name);

}  // namespace weft::tj
