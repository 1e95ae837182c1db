// Reconciler: converges one TrainingJob (by "namespace/name" key) towards its
// spec. Level-triggered: it reads the job and its children from the informer
// caches, computes what should exist with the pure policies, applies the
// difference through KubeApi and writes status at most once.
//
// reconcile() reads as its steps: read the state; a finished job only waits
// for its TTL; refuse an invalid spec (or one whose template asks for pod
// powers the operator does not allow); ensure the children; suspend or
// resume; wait for Kueue's admission (a queued job under --kueue:
// reconciler_queue.cc); observe the current attempt's gang (relaunching it on a spec
// change); then the restart policy fails or restarts the gang, or the success
// policy completes it, or the start policy (start_policy.h) fails or restarts
// a gang whose pods did not start in time; otherwise wait for the old gang and the backoff,
// launch the missing ranks and report progress. While every rank runs, the
// bucket-size tuner (tuner/bucket_tuner.h) is one more policy step there:
// observe (the scrape poller's latest figures: rank 0's for status.progress,
// every rank's for the tuner while it searches), decide (the tuner's pure
// decide_tuning), apply (write status.tuning, the ConfigMap's bucket_cap_mb,
// events and metrics). A reconcile never scrapes a rank itself: it tells the
// poller (scrape_poller.h) which ranks to read and only reads its figures.
//
// Invariants:
//  - Cached objects are never modified; status is built on a copy.
//  - One status write per reconcile, skipped when nothing changed; it carries
//    the cached resourceVersion, so a reconcile based on a stale job fails
//    with Conflict (transient) instead of overwriting newer state.
//  - Pod names are fixed per rank, so a stale cache can never create a second
//    pod for a rank (the API server answers AlreadyExists).
//  - After launch, when the cache does not show every rank of the current
//    attempt, the gang is read live before anything is decided: the cache may
//    lag behind our own creates, and a spec change or a restart must not be
//    decided on a partial view.
//  - The job's status is the reconciler's memory (attempt, launch time), so a
//    reconcile never acts on a job older than its own last status write: when
//    the cached job is not the version it wrote, it reads the job live.
//  - Errors come back classified: NotFound (drop), Transient (requeue with
//    backoff), Terminal (condition + event already written, no requeue).
//  - status.phase is only ever set from compute_phase (phase_policy.h), and
//    Succeeded or Failed only through mark_terminal().
//  - No network I/O but the API server's: ranks' /metrics are read by the
//    scrape poller on its own threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kube/events.h"
#include "kube/informer.h"
#include "kube/kube_api.h"
#include "trainingjob/clock.h"
#include "trainingjob/constants.h"
#include "trainingjob/gang.h"
#include "trainingjob/operator_metrics.h"
#include "trainingjob/pod_powers.h"
#include "trainingjob/restart_policy.h"
#include "tuner/bucket_tuner.h"
#include "tuner/tuner_metrics.h"

namespace weft::tj {

// The reconciler's reads. There is no Secret cache: the operator only
// creates the rendezvous Secret (see ensure_secret), so it needs no right to
// read the cluster's Secrets.
struct Caches {
  kube::Informer& jobs;
  kube::Informer& pods;        // indexed by weft.dev/job
  kube::Informer& services;
  kube::Informer& configmaps;
  kube::Informer* network_policies = nullptr;  // null: no per-job NetworkPolicy
  // --kueue: the Workloads the operator owns (indexed by weft.dev/job); null:
  // Kueue's queue label is not acted on (queue_policy.h).
  kube::Informer* workloads = nullptr;
};

class ScrapePoller;
struct ReconcileContext;  // reconciler_context.h: the state of one reconcile

struct ReconcileResult {
  enum class Kind { Done, RequeueAfter, Transient, Terminal, NotFound };
  Kind kind = Kind::Done;
  std::chrono::milliseconds after{0};  // RequeueAfter
  std::string message;                 // errors

  static ReconcileResult done() { return {}; }
  static ReconcileResult requeue_after(std::chrono::milliseconds d) { return {Kind::RequeueAfter, d, ""}; }
  static ReconcileResult transient(std::string m) { return {Kind::Transient, {}, std::move(m)}; }
  static ReconcileResult terminal(std::string m) { return {Kind::Terminal, {}, std::move(m)}; }
  static ReconcileResult not_found() { return {Kind::NotFound, {}, ""}; }
};

class Reconciler {
 public:
  Reconciler(kube::KubeApi& api, Caches caches, kube::EventRecorder& events, OperatorMetrics* metrics = nullptr,
             std::function<TimePoint()> now = [] { return std::chrono::system_clock::now(); });

  ReconcileResult reconcile(const std::string& key);  // the steps, then what the poller scrapes

  // Where the ranks' figures come from (status.progress, the tuner's
  // samples): the poller this reconciler tells which ranks to scrape and
  // whose latest figures it reads. Null: no progress, and the tuner gets no
  // samples.
  void set_poller(ScrapePoller* poller) { poller_ = poller; }
  // What spec.template may give the pods (trainingjob/pod_powers.h); a job
  // asking for more is refused as an invalid spec. Default: nothing extra.
  void set_pod_powers(PodPowers allowed) { powers_ = allowed; }
  // The NetworkPolicyPeers admitted to the ranks' metrics port by each job's
  // NetworkPolicy (when Caches::network_policies is set); null = anyone.
  void set_metrics_from(Json peers) { metrics_from_ = std::move(peers); }
  // How often the tuner asks for samples while a trial runs (--tuning-poll-seconds).
  void set_tuner_options(tuner::TunerOptions opts) { tuner_opts_ = opts; }
  // How long a pod on its node may take to start its worker before the gang
  // is restarted or, for a cause a restart cannot cure, the job fails
  // (--pod-start-timeout-seconds; start_policy.h). 0: no deadline.
  void set_pod_start_timeout(std::chrono::seconds t) { pod_start_timeout_ = t; }

 private:
  using Context = ReconcileContext;
  struct Terminal;

  // The steps of reconcile(), in order (steps() runs them). Those returning
  // a result end the reconcile; std::nullopt means "go on".
  ReconcileResult steps(const std::string& key, Context& cx);
  std::optional<ReconcileResult> read_state(const std::string& key, Context& cx);
  kube::ObjectPtr current_job(const std::string& ns, const std::string& name);
  ReconcileResult finished_job(Context& cx);
  ReconcileResult refuse_spec(Context& cx);
  bool ensure_children(Context& cx);
  // After a create's AlreadyExists: reads the pod; an older attempt's is
  // recorded for deletion (Context::changes), its rank created later.
  bool pod_there_is_current(Context& cx, int rank);
  ReconcileResult suspend(Context& cx);
  void resume_if_suspended(Context& cx);
  // reconciler_queue.cc (--kueue, a job with Kueue's queue label): the job
  // goes on only while Kueue admits its Workload; otherwise no pod runs and
  // the reconcile ends (Queued, condition Admitted False with Kueue's words).
  std::optional<ReconcileResult> gate_on_queue(Context& cx);
  ReconcileResult stop_for_queue(Context& cx, const std::string& reason, const std::string& message);
  // Records the Workload to create (Context::changes); what went wrong reading
  // its priority class, if anything.
  std::optional<std::string> create_workload(Context& cx, const std::string& queue);
  bool queued(const Context& cx) const;
  kube::ObjectPtr find_workload(const Context& cx) const;
  void report_pods_ready(Context& cx);  // the Workload's PodsReady (waitForPodsReady)
  void finish_workload(Context& cx);    // a finished job's Workload Finished: Kueue releases the quota
  void apply_workload_changes(Context& cx);  // finish(): create, delete or patch the Workload
  bool cache_shows_full_gang(const Context& cx) const;
  bool refresh_pods_live(Context& cx);  // replaces cx.pods with a live list; false on API error
  bool relaunch_if_spec_changed(Context& cx);
  void next_attempt(Context& cx);
  void observe_gang(Context& cx);
  ReconcileResult fail_gang(Context& cx, const RestartDecision& decision);
  ReconcileResult restart_gang(Context& cx, const RestartDecision& decision);
  ReconcileResult complete(Context& cx);
  // spec.elastic: relaunches the gang smaller when its pods are not placed in
  // time, or at the planned size again (elastic_policy.h).
  std::optional<ReconcileResult> resize_gang(Context& cx);
  // Starts the next attempt, which stops the current gang (its ranks
  // checkpoint the step they agree on as they stop): not a restart, so
  // nothing counts against maxRestarts and no backoff is waited.
  void relaunch_gang(Context& cx);
  std::optional<ReconcileResult> wait_for_relaunch(Context& cx);
  void launch_missing_ranks(Context& cx);
  ReconcileResult refuse_pods(Context& cx);
  ReconcileResult report_progress(Context& cx);
  void observe_ranks(Context& cx);                // the poller's target and status.progress
  void observe_tuning(Context& cx);               // reconciler_tuning.cc: the tuner's samples
  ReconcileResult tune_bucket_size(Context& cx);  // reconciler_tuning.cc: decide and apply
  // reconciler_stragglers.cc: names a slow rank (condition Straggler, event,
  // metric) from the poller's window of the ranks' pace; with action replace,
  // relaunches the gang away from its node (a result: the reconcile ends).
  std::optional<ReconcileResult> name_stragglers(Context& cx);
  // After the steps: what the poller reads of the job until its next
  // reconcile (watch the ranks report_progress named, pause, or forget).
  void tell_poller(const std::string& key, const Context& cx, const ReconcileResult& result);

  // The one way into Succeeded or Failed.
  void mark_terminal(Context& cx, const Terminal& how);
  // Applies the writes the steps asked for (Context::changes), reports what
  // their answers revealed (a PodGroup or Workload the API server refuses),
  // writes status once (if it changed), records the events, classifies
  // errors. A job whose TTL ran out is deleted instead of written.
  ReconcileResult finish(Context& cx, ReconcileResult result);
  void apply_changes(Context& cx);

  bool ensure_secret(Context& cx);  // creates the rendezvous Secret unless this reconcile did; false on error
  // Gang scheduling: creates the PodGroup, or brings an existing one's spec
  // (minMember, ...) to the job's; false when it cannot exist (then no pods).
  bool ensure_podgroup(Context& cx);
  void remove_podgroup(Context& cx);  // when the gang is gone for good: suspended or finished
  // After a spec change: the PodGroups of the kinds the spec no longer asks
  // for (gang scheduling turned off, another provider).
  void remove_unwanted_podgroups(Context& cx);
  // While the gang waits for its scheduler: its PodGroup must still exist
  // and ask for this gang (someone may have deleted or edited it). Decides
  // only: finish() creates or patches it (Context::Changes::keep_podgroup).
  void keep_podgroup_while_waiting(Context& cx);
  void set_scheduling_condition(Context& cx);  // again from finish() when the PodGroup write found a problem
  int create_pods(Context& cx, const std::vector<int>& ranks);  // pods of cx.status.attempt; returns how many
  // as_cached: only pods unchanged since the cache saw them (resourceVersion precondition).
  void remove_pods(Context& cx, const std::vector<kube::ObjectPtr>& pods, bool as_cached = false);
  void write_bucket_cap(Context& cx, const std::string& mb);  // the ConfigMap's bucket_cap_mb, unless it holds mb

  kube::KubeApi& api_;
  Caches caches_;
  kube::EventRecorder& events_;
  OperatorMetrics* metrics_;
  std::function<TimePoint()> now_;
  PodPowers powers_;
  Json metrics_from_;
  ScrapePoller* poller_ = nullptr;
  std::unique_ptr<tuner::TunerMetrics> tuner_metrics_;
  tuner::TunerOptions tuner_opts_;
  std::chrono::seconds pod_start_timeout_{kDefaultPodStartTimeoutSeconds};
  std::mutex tuning_mu_;
  std::map<std::string, tuner::OpenTrial> tuning_open_;  // job uid -> the open trial's window
  std::map<std::string, uint64_t> tuning_seen_;           // ns/name -> seq of the last round handed to the tuner
  std::mutex written_mu_;
  std::map<std::string, std::string> written_rv_;  // key -> resourceVersion of our last status write
};

}  // namespace weft::tj
