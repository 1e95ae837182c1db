// The worker metrics the operator reads: every family's name, type and label
// keys. weft-worker registers these families from the names below
// (worker/metrics/train_metrics.cc) and the operator's readers parse with
// them: status.progress (operator/trainingjob/progress.cc), the bucket-size
// tuner (operator/tuner/trial_window.cc) and straggler detection
// (operator/trainingjob/straggler_policy.cc). A name changed here changes on
// both sides; tests/operator/worker_exposition_test.cc feeds a real rank's
// scrape of each strategy through all three readers. Families only the
// worker's dashboards read are documented in docs/metrics.md and named in
// train_metrics.cc. Standard library only, so either side may include it.
#pragma once

#include <string_view>

namespace weft::contract::metrics {

enum class Type { Gauge, Counter, Histogram };

struct Family {
  const char* name;
  Type type;
};

// ---- Labels -------------------------------------------------------------------
// Every family but kRankInfo carries the constant label `rank` (the global
// rank); the operator reads rank 0's series by it.
inline constexpr const char* kLabelRank = "rank";
// weft_phase_seconds_total{phase}: the phases of a step, which sum to its wall
// time (docs/metrics.md).
inline constexpr const char* kLabelPhase = "phase";
inline constexpr const char* kPhaseData = "data";
inline constexpr const char* kPhaseForward = "forward";
inline constexpr const char* kPhaseBackward = "backward";
inline constexpr const char* kPhaseOptimizer = "optimizer";
inline constexpr const char* kPhaseExposedComm = "exposed_comm";
inline constexpr const char* kPhaseOther = "other";
// weft_sync_comm_seconds_total / weft_exposed_comm_seconds_total{group}: the
// process group whose gradient sync is counted.
inline constexpr const char* kLabelGroup = "group";

// ---- Progress (status.progress, rank 0) ----------------------------------------
inline constexpr Family kStep{"weft_step", Type::Gauge};           // optimizer steps done (1-based)
inline constexpr Family kLoss{"weft_loss", Type::Gauge};           // last step's training loss
inline constexpr Family kEvalLoss{"weft_eval_loss", Type::Gauge};  // last held-out loss
inline constexpr Family kEvalStep{"weft_eval_step",
                                  Type::Gauge};  // step of that evaluation (0: none yet)
inline constexpr Family kTokensPerSecond{"weft_tokens_per_second",
                                         Type::Gauge};  // whole job, last step
inline constexpr Family kOverlapRatio{"weft_overlap_ratio",
                                      Type::Gauge};  // 1 - exposed/comm, last step
inline constexpr Family kExposedCommLastStep{"weft_exposed_comm_last_step_seconds", Type::Gauge};
inline constexpr Family kBucketCapBytes{"weft_bucket_cap_bytes",
                                        Type::Gauge};  // also read by the tuner

// ---- Bucket-size tuner (every rank) ----------------------------------------------
inline constexpr Family kStepSeconds{"weft_step_seconds",
                                     Type::Histogram};  // wall time of one step
// The histogram's series the tuner reads (Prometheus appends _sum and _count).
inline constexpr const char* kStepSecondsSum = "weft_step_seconds_sum";
inline constexpr const char* kStepSecondsCount = "weft_step_seconds_count";
inline constexpr Family kExposedCommSeconds{"weft_exposed_comm_seconds_total",
                                            Type::Counter};  // {group}

// ---- Straggler detection (every rank) ----------------------------------------------
inline constexpr Family kComputeSeconds{"weft_compute_seconds_total", Type::Counter};
inline constexpr Family kWaitSeconds{"weft_wait_seconds_total", Type::Counter};

// ---- Step phases (dashboards; the phases sum to weft_step_seconds_sum) ----------
inline constexpr Family kPhaseSeconds{"weft_phase_seconds_total", Type::Counter};  // {phase}

// ---- Whose metrics these are ------------------------------------------------------
// kRankInfo = 1, labelled with the job uid (WEFT_JOB_UID, empty outside a
// TrainingJob), WEFT_ATTEMPT, the global RANK, NODE_RANK (the pod's index in a
// TrainingJob) and LOCAL_RANK. The operator uses a scrape only when these
// match the pod it asked (another process on the port, or a previous attempt,
// is never read as the job's).
inline constexpr Family kRankInfo{"weft_rank_info", Type::Gauge};
inline constexpr const char* kLabelInfoJobUid = "job_uid";
inline constexpr const char* kLabelInfoAttempt = "attempt";
inline constexpr const char* kLabelInfoRank = "rank";
inline constexpr const char* kLabelInfoNodeRank = "node_rank";
inline constexpr const char* kLabelInfoLocalRank = "local_rank";

// Every family above, for tests that check a real scrape has them all.
inline constexpr Family kOperatorReads[] = {kStep,
                                            kLoss,
                                            kEvalLoss,
                                            kEvalStep,
                                            kTokensPerSecond,
                                            kOverlapRatio,
                                            kExposedCommLastStep,
                                            kBucketCapBytes,
                                            kStepSeconds,
                                            kExposedCommSeconds,
                                            kComputeSeconds,
                                            kWaitSeconds,
                                            kRankInfo};

constexpr bool is_series_of(std::string_view series, const Family& f, std::string_view suffix) {
  const std::string_view name = f.name;
  return series.size() == name.size() + suffix.size() && series.substr(0, name.size()) == name &&
         series.substr(name.size()) == suffix;
}
static_assert(is_series_of(kStepSecondsSum, kStepSeconds, "_sum") &&
              is_series_of(kStepSecondsCount, kStepSeconds, "_count"));
// Prometheus naming: counters end in _total.
static_assert(
    is_series_of(kExposedCommSeconds.name, Family{"weft_exposed_comm_seconds", Type::Counter},
                 "_total") &&
    is_series_of(kComputeSeconds.name, Family{"weft_compute_seconds", Type::Counter}, "_total") &&
    is_series_of(kWaitSeconds.name, Family{"weft_wait_seconds", Type::Counter}, "_total") &&
    is_series_of(kPhaseSeconds.name, Family{"weft_phase_seconds", Type::Counter}, "_total"));

}  // namespace weft::contract::metrics
