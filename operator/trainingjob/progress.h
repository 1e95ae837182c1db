// status.progress: what `kubectl get tj` shows of a running job (step, loss,
// tokens/s, overlap ratio), read from rank 0's own /metrics. The scrape
// poller (scrape_poller.h, on threads of its own, never a reconcile) scrapes
// rank 0 (pod IP + the job's metrics port) at most once per
// --progress-seconds per job, with a short timeout, and the next reconcile
// writes what it read; a failed scrape keeps the last progress and is retried
// at the next interval. Rank 0 is
// enough: loss and tokens/s are job-wide there, and every rank runs the same
// step. When rank 0's run ends, its termination message carries its final
// progress, which replaces the last scrape.
// defines: Progress, progress_from_metrics, progress_from_termination_message, progress_json.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "scrape/prom_text.h"

namespace weft::tj {

struct Progress {
  long step = 0;
  double loss = 0;
  std::optional<double> eval_loss;  // the last held-out evaluation's; none before the first
  double tokens_per_second = 0;
  double overlap_ratio = 0;
  std::optional<double> exposed_comm_seconds;  // compute's wait for gradient sync in the last step
  std::optional<double> bucket_cap_mb;         // the gradient bucket cap in force (MiB)
};

// Reads weft_step, weft_loss, weft_tokens_per_second and weft_overlap_ratio
// of rank 0, and weft_eval_loss once weft_eval_step says an evaluation ran. nullopt when weft_step is missing (not a weft worker, or it has
// not finished a step yet); the others default to 0 when missing.
std::optional<Progress> progress_from_metrics(const scrape::Exposition& m);

// Empty when `m` is the metrics of the first rank of pod `pod_index` of
// attempt `attempt` of the TrainingJob `uid` (contract::metrics::kRankInfo);
// else what it is instead ("... is job uid X attempt 2 pod 1", "... exports
// no weft_rank_info"), for the event and condition that say so.
std::string not_this_rank(const scrape::Exposition& m, const std::string& uid, int attempt, int pod_index);

// The final progress rank 0 wrote to its termination message when its run
// ended (contract::kProgressLinePrefix): the line's step, loss, evalLoss,
// tokens/s and overlap ratio. nullopt when the message has no such line or it is not the
// JSON the contract describes.
std::optional<Progress> progress_from_termination_message(const std::string& message);

// The status.progress object: {step, loss, evalLoss (once evaluated),
// tokensPerSecond, overlapRatio, exposedCommSeconds and bucketCapMB (when
// the rank reports them), updatedAt}. Non-finite numbers (a diverged loss) are written as null, which
// JSON can carry and the schema allows.
nlohmann::json progress_json(const Progress& p, const std::string& now);

}  // namespace weft::tj
