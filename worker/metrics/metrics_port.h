// Where a rank serves its metrics, by the contract's rule
// (contract::metrics_port in contract/weft_contract.h): port = metrics.port +
// LOCAL_RANK. weft-worker binds it and weft-run prints it through these
// functions, so the two never disagree. Several ranks on one host (weft-run)
// get consecutive ports, in a pod of several ranks too; a pod of one rank has LOCAL_RANK 0.
#pragma once

#include <map>
#include <string>

#include "config/config.h"

namespace weft {

struct MetricsEndpoint {
  int port = 0;         // 0: metrics disabled (see `problem` for why, if not by config)
  std::string problem;  // non-empty when the port cannot be used, e.g. out of range
};

// `local_rank` >= 0 (LaunchEnv::local_rank, contract/launch_env.h). metrics.port 0
// disables metrics for every rank.
MetricsEndpoint metrics_endpoint(const MetricsConfig& m, int local_rank);

// How long the metrics server outlives a run that ended normally
// (metrics.linger_seconds; auto: kTrainingJobLingerSeconds when `in_training_job`,
// that is when the operator started the rank, else 0).
inline constexpr double kTrainingJobLingerSeconds = 15;
double metrics_linger_seconds(const MetricsConfig& m, bool in_training_job);

}  // namespace weft
