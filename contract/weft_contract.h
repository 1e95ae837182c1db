// The contract between weft-operator and weft-worker: what a rank's process is
// given (environment, mounted files, ports) and what it answers with (its exit
// code). The operator builds pods from these names and judges exits by these
// codes; the worker and weft-run read and set the same names, so a name
// changed here changes on both sides. Standard library only, so either side
// may include it anywhere.
#pragma once

#include <string_view>

namespace weft::contract {

// ---- Exit codes (weft-worker; weft-run exits with its first failed rank's) --
inline constexpr int kExitDone = 0;           // trained to the last step
inline constexpr int kExitBadConfig = 1;      // bad config, input or launch environment
inline constexpr int kExitInternal = 2;       // an unexpected error (a bug)
inline constexpr int kExitPeerLost = 3;       // a peer vanished or a collective timed out
inline constexpr int kExitCheckpointIo = 4;   // no checkpoint could be written or read
inline constexpr int kExitDiverged = 5;       // the loss became NaN or infinite (config or data)
inline constexpr int kExitInterrupted = 130;  // SIGINT, after writing a checkpoint (128 + 2)
inline constexpr int kExitPreempted = 143;    // SIGTERM, after writing a checkpoint (128 + 15)

// Whether a gang whose rank failed with `code` is worth restarting: every code
// but kExitBadConfig and kExitDiverged, because a bad config fails the same
// way again and a run resumed from the same checkpoint diverges at the same
// step (training is deterministic). Codes the worker never returns itself
// (137 after an OOM kill) are retried as well.
constexpr bool retryable(int code) { return code != kExitBadConfig && code != kExitDiverged; }

// ---- Environment of every rank ---------------------------------------------
// Set by the operator in every pod and by weft-run for every local rank:
inline constexpr const char* kEnvRank = "RANK";               // 0 .. WORLD_SIZE-1
inline constexpr const char* kEnvWorldSize = "WORLD_SIZE";    // ranks in the job
inline constexpr const char* kEnvMasterAddr = "MASTER_ADDR";  // host of rank 0's rendezvous store
inline constexpr const char* kEnvMasterPort = "MASTER_PORT";  // its port
// The gang attempt; keeps the rendezvous keys of two attempts apart.
inline constexpr const char* kEnvAttempt = "WEFT_ATTEMPT";
// Shared secret every rank presents to the rendezvous store.
inline constexpr const char* kEnvRdzvToken = "WEFT_RDZV_TOKEN";
// The world size the job's global batch is planned for (an elastic job that
// runs on fewer pods than it asked for). A smaller WORLD_SIZE scales
// train.grad_accum by WEFT_PLANNED_WORLD_SIZE / WORLD_SIZE, so that every
// optimizer step trains on the same samples as at the planned size. Unset:
// WORLD_SIZE.
inline constexpr const char* kEnvPlannedWorldSize = "WEFT_PLANNED_WORLD_SIZE";

// Set by weft-run for every rank it starts (on one machine, and in pods of
// jobs with spec.procsPerPod > 1, where weft-run is the in-pod launcher of
// that many ranks), and by the operator in a pod of one rank (0, 1 and the
// pod's index):
inline constexpr const char* kEnvLocalRank = "LOCAL_RANK";  // rank on this host (default 0)
inline constexpr const char* kEnvLocalWorldSize = "LOCAL_WORLD_SIZE";  // ranks on this host
// This host's index among the launchers: RANK = NODE_RANK·LOCAL_WORLD_SIZE + LOCAL_RANK.
inline constexpr const char* kEnvNodeRank = "NODE_RANK";

// Read by the worker when set. The address Gloo binds (default: the one that
// routes to MASTER_ADDR):
inline constexpr const char* kEnvBindAddr = "WEFT_BIND_ADDR";
// Overrides of config fields (the field each one sets in the comment;
// bucket_cap_file is parallel.bucket_cap_file). The operator sets
// WEFT_BUCKET_CAP_FILE in every pod, to kBucketCapPath below.
inline constexpr const char* kEnvBucketCapFile = "WEFT_BUCKET_CAP_FILE";  // bucket_cap_file
inline constexpr const char* kEnvSteps = "WEFT_STEPS";                    // train.steps
inline constexpr const char* kEnvBucketCapMb = "WEFT_BUCKET_CAP_MB";      // parallel.bucket_cap_mb
inline constexpr const char* kEnvCheckpointDir = "WEFT_CHECKPOINT_DIR";   // checkpoint.dir
inline constexpr const char* kEnvMetricsPort = "WEFT_METRICS_PORT";       // metrics.port
inline constexpr const char* kEnvDevice = "WEFT_DEVICE";                  // device
inline constexpr const char* kEnvOutDir = "WEFT_OUT_DIR";                 // train.out_dir
inline constexpr const char* kEnvAttention = "WEFT_ATTENTION";           // train.attention
// Set to anything but "" or "0" in a rank's environment, the worker skips its
// memory check (for an estimate that is wrong about a setup); the operator
// then warns that the pod may be killed for memory instead of refused.
inline constexpr const char* kEnvSkipMemoryCheck = "WEFT_SKIP_MEMORY_CHECK";
// The file rank 0 writes its final progress to when its run ends, and any
// rank its reason when it fails (the operator sets it to the container's
// terminationMessagePath, so the pod's termination message carries it; see
// kProgressLinePrefix below).
inline constexpr const char* kEnvTerminationLog = "WEFT_TERMINATION_LOG";
// The TrainingJob's metadata.uid, set by the operator in every pod: a rank
// labels its metrics with it (metrics::kRankInfo, weft_metrics.h), and a rank of a TrainingJob
// whose metrics port is taken exits instead of training unseen.
inline constexpr const char* kEnvJobUid = "WEFT_JOB_UID";
inline constexpr const char* kTerminationLogPath = "/dev/termination-log";  // Kubernetes' default path

// The names the operator sets in every pod (RANK and LOCAL_RANK through
// weft-run in a pod of several ranks); a job's pod template may not override
// them.
inline constexpr const char* kOperatorEnv[] = {kEnvRank,       kEnvWorldSize,     kEnvMasterAddr,
                                               kEnvMasterPort, kEnvAttempt,       kEnvRdzvToken,
                                               kEnvLocalRank,  kEnvLocalWorldSize, kEnvNodeRank,
                                               kEnvBucketCapFile, kEnvTerminationLog, kEnvPlannedWorldSize,
                                               kEnvJobUid};

// ---- Whose metrics these are ----------------------------------------------
// weft_rank_info and every other metric the operator reads: weft_metrics.h.

// ---- Files the operator mounts into every pod ------------------------------
// The job's ConfigMap, mounted as a whole directory (never with subPath: only a
// directory mount sees later updates of a key, and the tuner updates one).
inline constexpr const char* kConfigMountDir = "/etc/weft";
// spec.worker as YAML: the worker's config file, its command-line argument.
inline constexpr const char* kConfigKey = "config.yaml";
inline constexpr const char* kConfigPath = "/etc/weft/config.yaml";
// The tuned gradient bucket cap: a positive decimal number of MiB ("25",
// "2.5"), or empty (no size asked for). One channel for each value: the
// spec's parallel.bucket_cap_mb reaches the workers in config.yaml, and this
// key, empty at creation, carries only what the tuner writes. Rank 0 polls
// the file and every rank switches to a new value at the same step.
inline constexpr const char* kBucketCapKey = "bucket_cap_mb";
inline constexpr const char* kBucketCapPath = "/etc/weft/bucket_cap_mb";  // WEFT_BUCKET_CAP_FILE

// ---- The gradient bucket cap ------------------------------------------------
// One rule for a bucket cap in MiB wherever one is given: the worker's
// parallel.bucket_cap_mb (config YAML, WEFT_BUCKET_CAP_MB), the cap file
// (kBucketCapKey above), and the operator's spec.worker.parallel.bucket_cap_mb
// and spec.tuning.bucketSize.minMB/maxMB (the CRD schema's maximum). A cap is
// a number of MiB in (0, kMaxBucketCapMb]. 4 GiB of fp32 gradients is already
// one bucket for a model of a billion parameters; anything larger is a typo or
// a unit mistake (bytes for MiB), and the bound keeps a cap's bytes exact in
// int64 and double (a cap of 1e14 MiB used to overflow into one-parameter
// buckets). Tiny caps are valid: they put every parameter in a bucket of its
// own. The worker's first_bucket_mb follows the same rule, 0 meaning auto.
inline constexpr double kMaxBucketCapMb = 4096;
// Whether `mb` is a valid cap; with allow_auto, 0 (the config's `auto`) is
// too. NaN and infinities are not.
constexpr bool valid_bucket_cap_mb(double mb, bool allow_auto = false) {
  if (allow_auto && mb == 0) return true;
  return mb > 0 && mb <= kMaxBucketCapMb;  // NaN fails both comparisons, +inf the second
}
// The rule in words, for error messages: "a number of MiB in (0, 4096]".
inline constexpr const char* kBucketCapRule = "a number of MiB in (0, 4096]";
static_assert(kMaxBucketCapMb == 4096, "kBucketCapRule and the CRD's maximum spell out this bound");
static_assert(valid_bucket_cap_mb(kMaxBucketCapMb) && !valid_bucket_cap_mb(0) && valid_bucket_cap_mb(0, true) &&
              !valid_bucket_cap_mb(-1, true) && !valid_bucket_cap_mb(1e14));

constexpr bool is_file_in(std::string_view path, std::string_view dir, std::string_view name) {
  return path.size() == dir.size() + 1 + name.size() && path.substr(0, dir.size()) == dir &&
         path[dir.size()] == '/' && path.substr(dir.size() + 1) == name;
}
// The paths above are those keys inside the mount.
static_assert(is_file_in(kConfigPath, kConfigMountDir, kConfigKey));
static_assert(is_file_in(kBucketCapPath, kConfigMountDir, kBucketCapKey));

// ---- Final progress ----------------------------------------------------------
// When its run ends (all steps done, or stopped by a signal after a
// checkpoint), rank 0 writes one line to $WEFT_TERMINATION_LOG:
//   weft-progress {"step":200,"loss":0.7123,"tokensPerSecond":17405,"overlapRatio":0.318}
// (the step reached, the last step's loss, the run's tokens/s and overlap
// ratio), followed on a stop by a line saying why. The operator reads it from
// rank 0's termination message, so status.progress is final after the job
// ends, not the last scrape's.
inline constexpr const char* kProgressLinePrefix = "weft-progress ";

// ---- Metrics -----------------------------------------------------------------
// A rank serves Prometheus metrics on metrics.port + LOCAL_RANK, so ranks that
// share a host (weft-run) get consecutive ports; a pod's only rank uses the
// base port. metrics.port defaults to kMetricsBasePort.
inline constexpr int kMetricsBasePort = 9400;
constexpr int metrics_port(int local_rank, int base_port = kMetricsBasePort) {
  return base_port + local_rank;
}

}  // namespace weft::contract
