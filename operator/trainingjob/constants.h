// Every label key, annotation, condition type, event reason and fixed name
// the operator writes, in one place, so tests, docs and dashboards agree.
// What the worker reads too (exit codes, env names, mounted files, the
// metrics port) is in contract/weft_contract.h, not here.
#pragma once

namespace weft::tj {

// Labels on every child object.
inline constexpr const char* kLabelJob = "weft.dev/job";          // TrainingJob name
// Kueue's queue label: on the TrainingJob, copied to its pods (Kueue and
// schedulers that read it from pods see the job's queue).
inline constexpr const char* kLabelKueueQueue = "kueue.x-k8s.io/queue-name";
inline constexpr const char* kLabelKueuePriority = "kueue.x-k8s.io/priority-class";
inline constexpr const char* kLabelKueueJobUid = "kueue.x-k8s.io/job-uid";
inline constexpr const char* kLabelRank = "weft.dev/rank";        // pods only
inline constexpr const char* kLabelAttempt = "weft.dev/attempt";  // pods only; gang attempt
inline constexpr const char* kLabelManagedBy = "app.kubernetes.io/managed-by";
inline constexpr const char* kManagedBy = "weft-operator";
// Pod annotation: hash of the spec fields a pod is built from; a pod whose
// hash differs from the job's current spec belongs to an outdated gang.
inline constexpr const char* kAnnotationSpecHash = "weft.dev/spec-hash";

// Pod layout the worker does not see.
inline constexpr const char* kSecretTokenKey = "token";          // the Secret's key; pods get it as WEFT_RDZV_TOKEN
inline constexpr const char* kContainerName = "worker";
inline constexpr const char* kWorkerBinary = "weft-worker";
inline constexpr const char* kLauncherBinary = "weft-run";       // the in-pod launcher when procsPerPod > 1
inline constexpr const char* kShmVolume = "weft-shm";            // memory-backed emptyDir at /dev/shm (NCCL's SHM transport)
inline constexpr const char* kGpuResource = "nvidia.com/gpu";    // what procsPerPod: auto counts
inline constexpr int kMaxProcsPerPod = 256;
// spec.template fields copied into every pod's spec unchanged: where it runs
// and how (GPU clusters' scheduling, runtime and network settings), and how
// long a deleted pod's worker may take to checkpoint after SIGTERM.
inline constexpr const char* kTemplatePodFields[] = {
    "nodeSelector",      "affinity",         "tolerations",      "topologySpreadConstraints",
    "priorityClassName", "schedulerName",    "runtimeClassName", "serviceAccountName",
    "imagePullSecrets",  "hostNetwork",      "dnsPolicy",        "terminationGracePeriodSeconds"};
inline constexpr const char* kConfigVolume = "weft-config";      // the ConfigMap, at contract::kConfigMountDir
inline constexpr const char* kScratchVolume = "weft-tmp";        // emptyDir at /tmp (the root filesystem is read-only)

// Gang scheduling (spec.scheduling, kube/resource.h's PodGroups): how a pod
// names its PodGroup for each provider, and the providers' usual scheduler
// names (scheduler-plugins' second-scheduler chart; Volcano's).
inline constexpr const char* kLabelPodGroup = "scheduling.x-k8s.io/pod-group";          // scheduler-plugins
inline constexpr const char* kAnnotationVolcanoGroup = "scheduling.k8s.io/group-name";  // Volcano
inline constexpr const char* kSchedulerPluginsScheduler = "scheduler-plugins-scheduler";
inline constexpr const char* kVolcanoScheduler = "volcano";

// --pod-start-timeout-seconds' default: how long a pod bound to its node may
// wait to start its worker (start_policy.h). Ten minutes covers pulling a
// multi-GiB image over a slow link; a larger one needs the flag raised.
inline constexpr int kDefaultPodStartTimeoutSeconds = 600;

// Phases (status.phase).
inline constexpr const char* kPhasePending = "Pending";
inline constexpr const char* kPhaseRunning = "Running";
inline constexpr const char* kPhaseRestarting = "Restarting";
inline constexpr const char* kPhaseSucceeded = "Succeeded";
inline constexpr const char* kPhaseFailed = "Failed";
inline constexpr const char* kPhaseSuspended = "Suspended";
inline constexpr const char* kPhaseQueued = "Queued";  // --kueue: waiting for Kueue to admit the job

// Condition types.
inline constexpr const char* kCondReady = "Ready";          // all ranks running
inline constexpr const char* kCondRestarting = "Restarting";
inline constexpr const char* kCondSuspended = "Suspended";
inline constexpr const char* kCondSucceeded = "Succeeded";
inline constexpr const char* kCondFailed = "Failed";
// Gang-scheduled jobs only: True once the scheduler placed every pod of the
// attempt; False says why not (no PodGroup API, unschedulable, waiting).
inline constexpr const char* kCondGangScheduled = "GangScheduled";
// True: no memory problem found; False: the pod's memory limit is below the
// worker's estimate (trainingjob/memory_policy.h).
inline constexpr const char* kCondMemoryEstimate = "MemoryEstimate";
// spec.stragglers: True while a rank computes beyond the threshold above its gang's median.
inline constexpr const char* kCondStraggler = "Straggler";
// spec.elastic: True while the gang has its planned pods and trains.
inline constexpr const char* kCondFullSize = "FullSize";
// Set once a rank's metrics port answered with another process's metrics
// (contract::metrics::kRankInfo did not match the pod): False, reason
// ForeignMetrics, while it does (those figures are never used); True, reason
// OwnMetrics, once every scrape is the job's own again.
inline constexpr const char* kCondMetrics = "MetricsAttributed";
// Queued jobs (label kueue.x-k8s.io/queue-name, operator run with --kueue):
// True while Kueue admits the job's Workload; False says why it waits
// (WorkloadCreated until Kueue has looked at it, then WaitingForAdmission
// with Kueue's own words) or why it was stopped
// (Evicted: preempted, pods not ready in time, ...).
inline constexpr const char* kCondAdmitted = "Admitted";
inline constexpr const char* kReasonAdmitted = "Admitted";
inline constexpr const char* kReasonWorkloadCreated = "WorkloadCreated";
inline constexpr const char* kReasonWaitingForAdmission = "WaitingForAdmission";
inline constexpr const char* kReasonEvicted = "Evicted";
inline constexpr const char* kReasonWorkloadUnavailable = "WorkloadUnavailable";
inline constexpr const char* kReasonForeignMetrics = "ForeignMetrics";
inline constexpr const char* kReasonOwnMetrics = "OwnMetrics";

// Condition and event reasons.
inline constexpr const char* kReasonCreated = "Created";                // children created
inline constexpr const char* kReasonPodsCreated = "PodsCreated";
inline constexpr const char* kReasonAllRanksRunning = "AllRanksRunning";
inline constexpr const char* kReasonWaitingForRanks = "WaitingForRanks";
inline constexpr const char* kReasonRankFailed = "RankFailed";          // retryable exit code
inline constexpr const char* kReasonRankDeleted = "RankDeleted";        // pod deleted (or evicted on servers < 1.26)
inline constexpr const char* kReasonRankEvicted = "RankEvicted";        // eviction API or kubelet node pressure
inline constexpr const char* kReasonRankPreempted = "RankPreempted";    // scheduler or kubelet preemption
inline constexpr const char* kReasonRankNodeLost = "RankNodeLost";      // node gone, unreachable or shut down
inline constexpr const char* kReasonRankOOMKilled = "RankOOMKilled";    // the worker container hit its memory limit
// A pod on its node did not start its worker within --pod-start-timeout-seconds
// (waiting in ContainerCreating or another reason a restart may cure).
inline constexpr const char* kReasonRankStartTimeout = "RankStartTimeout";
// A pod on its node whose worker container cannot start for a reason a gang
// restart would not cure (start_policy.h): Ready False while it waits, and
// Failed with the same reason once --pod-start-timeout-seconds passes.
inline constexpr const char* kReasonImageNotPresent = "ImageNotPresent";          // ErrImageNeverPull
inline constexpr const char* kReasonImagePullFailed = "ImagePullFailed";          // ErrImagePull, ImagePullBackOff, ...
inline constexpr const char* kReasonInvalidImageName = "InvalidImageName";        // InvalidImageName
inline constexpr const char* kReasonContainerConfigError = "ContainerConfigError";  // CreateContainerConfigError
inline constexpr const char* kReasonContainerCreateFailed = "ContainerCreateFailed";  // CreateContainerError, RunContainerError
inline constexpr const char* kReasonBadConfig = "BadConfig";            // exit code 1
inline constexpr const char* kReasonDiverged = "Diverged";              // exit code 5: NaN or infinite loss
inline constexpr const char* kReasonMaxRestarts = "MaxRestartsExceeded";
inline constexpr const char* kReasonBackoff = "RestartBackoff";
inline constexpr const char* kReasonGangRestarted = "GangRestarted";
inline constexpr const char* kReasonInvalidSpec = "InvalidSpec";
inline constexpr const char* kReasonCompleted = "Completed";
inline constexpr const char* kReasonSuspended = "Suspended";
inline constexpr const char* kReasonResumed = "Resumed";
inline constexpr const char* kReasonTTLExpired = "TTLExpired";
inline constexpr const char* kReasonCreateFailed = "CreateFailed";
inline constexpr const char* kReasonSpecChanged = "SpecChanged";       // gang relaunched for a new spec
// GangScheduled: every pod placed; no PodGroup (the CRD is not served, or the
// operator may not create it), so no pods either; the scheduler reported a
// pod unschedulable; pods wait for the gang scheduler.
inline constexpr const char* kReasonGangPlaced = "GangPlaced";
inline constexpr const char* kReasonPodGroupUnavailable = "PodGroupUnavailable";
inline constexpr const char* kReasonUnschedulable = "Unschedulable";
inline constexpr const char* kReasonWaitingForScheduler = "WaitingForScheduler";
// MemoryEstimate: the limit is below the estimate (also a Warning event),
// at or above it, not set, or the estimate's inputs cannot be read.
// spec.elastic (FullSize condition, events)
inline constexpr const char* kReasonShrunk = "Shrunk";                    // pods not placed in time: fewer pods
inline constexpr const char* kReasonGrowing = "Growing";                  // the planned size tried again
inline constexpr const char* kReasonMinimumUnplaced = "MinimumUnplaced";  // not even minReplicas placed
inline constexpr const char* kReasonPlannedSize = "PlannedSize";          // every planned pod placed and training
// spec.stragglers (Straggler condition, events)
inline constexpr const char* kReasonSlowRank = "SlowRank";                // a rank named
inline constexpr const char* kReasonNoStraggler = "NoStraggler";          // every rank within the threshold
inline constexpr const char* kReasonStragglerReplaced = "StragglerReplaced";  // relaunched away from its node
inline constexpr const char* kReasonLimitBelowEstimate = "LimitBelowEstimate";
inline constexpr const char* kReasonWithinLimit = "WithinLimit";
inline constexpr const char* kReasonNoMemoryLimit = "NoMemoryLimit";
inline constexpr const char* kReasonNotEstimated = "NotEstimated";

}  // namespace weft::tj
