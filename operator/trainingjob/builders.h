// Builders of the child objects of one TrainingJob (pure: job JSON in,
// object JSON out). Names: Service `<job>`, ConfigMap `<job>-config`,
// Secret `<job>-rdzv`, pods `<job>-<rank>` with hostname `<job>-<rank>` and
// subdomain `<job>`, so rank 0 resolves as `<job>-0.<job>.<ns>.svc`.
// Every child carries the job's labels and a controller owner reference, so
// deleting the job garbage-collects them.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "trainingjob/types.h"

namespace weft::tj {

using Json = nlohmann::json;

std::string service_name(const std::string& job);
std::string configmap_name(const std::string& job);
std::string secret_name(const std::string& job);
std::string pod_name(const std::string& job, int rank);
std::string master_addr(const std::string& job, const std::string& ns);

Json owner_reference(const Json& job);
Json child_labels(const std::string& job);

Json build_service(const Json& job, const TrainingJobSpec& spec);
// The worker config (contract::kConfigKey) and the bucket cap
// (contract::kBucketCapKey), which is only written at creation: later the
// tuner owns it.
Json build_configmap(const Json& job, const TrainingJobSpec& spec);
Json build_secret(const Json& job, const std::string& token);
Json build_pod(const Json& job, const TrainingJobSpec& spec, int rank, int attempt);

std::string worker_config_yaml(const Json& worker);  // spec.worker as YAML
// Stable (FNV-1a 64) hash of every spec field that shapes a pod; stored in
// the pod annotation weft.dev/spec-hash.
std::string pod_spec_hash(const TrainingJobSpec& spec);
std::string random_token();                          // 32 random bytes, hex

// Env names the operator sets (contract::kOperatorEnv); spec.template.env may
// not override them.
bool is_contract_env(const std::string& name);

}  // namespace weft::tj
