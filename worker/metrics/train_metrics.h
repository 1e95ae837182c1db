// The worker's Prometheus metrics (docs/metrics.md documents every family;
// overlap is defined there once). TrainMetrics is the trainer's StepObserver:
// it turns each StepReport, the same numbers the progress line prints, and the
// communicators' cumulative CommStats into the `weft_*` families of a registry
// it owns. It never serves HTTP: only weft-worker's main creates the exposer
// and registers registry() with it.
//
// Invariants:
//  - Every family carries the constant label `rank` (the global rank); job and
//    namespace labels come from the scrape.
//  - The families the operator reads are registered from their names and
//    types in contract/weft_metrics.h; the rest are named here.
//  - Handles are built once in the constructor; only label values that cannot
//    be known up front (comm op/group, bucket index) are added on first use.
//  - Counters only go up: CommStats are cumulative, so counters advance by the
//    difference since the last step, and a negative difference is dropped.
//  - on_step/on_checkpoint run on the trainer thread; scrapes read the
//    registry concurrently, which prometheus-cpp makes safe.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "train/step_report.h"

namespace weft {

// Histogram buckets (seconds) for step and bucket-reduce times: 1 ms to 10 min
// in a 1-2.5-5 progression, so both a CPU toy step and a large GPU step with
// a long exposed sync fall into informative buckets.
const std::vector<double>& duration_buckets();

// weft_rank_info (contract::metrics::kRankInfo) = 1 with the rank's identity,
// in `registry`: whoever scrapes the port can tell this job's rank from
// another process. weft-worker registers it before the rendezvous, when it
// starts serving a registry that TrainMetrics fills later.
void register_rank_info(prometheus::Registry& registry, const std::string& job_uid, int attempt, int rank,
                        int node_rank, int local_rank);

class TrainMetrics : public StepObserver {
 public:
  // `groups`: the communicators whose CommStats feed weft_comm_*_total (null
  // entries and repeats of one communicator are ignored). `registry`: the one
  // to fill (already served, holding weft_rank_info); null: a new one.
  TrainMetrics(const WorkerConfig& cfg, int rank, int world,
               std::vector<comm::CommunicatorPtr> groups = {},
               std::shared_ptr<prometheus::Registry> registry = nullptr);

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  void on_step(const StepReport& r) override;
  void on_checkpoint(int64_t step) override;
  void on_eval(int64_t step, double loss) override;
  // The bucket cap the strategy resolved at startup (bucket_cap_mb auto), so
  // that weft_bucket_cap_bytes tells it before the first step; <= 0: none.
  void set_bucket_cap_mb(double mb);
  // weft_attention_kernel_info{kernel}: which kernels run attention in this
  // run (Trainer::attention_kernel: cpu, cudnn or simt).
  void set_attention_kernel(const std::string& kernel);
  // register_rank_info into registry().
  void set_identity(const std::string& job_uid, int attempt, int rank, int node_rank, int local_rank);
  // The last step this run reported (0 before its first): readiness (/ready)
  // means a step finished, so the rank joined the rendezvous and trains.
  // Safe to read from another thread.
  int64_t last_step() const { return last_step_.load(); }

 private:
  struct CommSeries {  // one (group, op) pair
    prometheus::Counter* seconds = nullptr;
    prometheus::Counter* bytes = nullptr;
    prometheus::Counter* ops = nullptr;
    comm::CommOpStats seen;  // cumulative stats already counted
  };
  struct SyncSeries {  // one gradient-sync group
    prometheus::Counter* sync = nullptr;
    prometheus::Counter* exposed = nullptr;
  };
  void update_comm();
  void update_buckets(const StepReport& r);
  void set_bucket_cap_bytes(double bytes);

  std::shared_ptr<prometheus::Registry> registry_;
  int rank_ = 0;
  std::atomic<int64_t> last_step_{0};
  std::vector<comm::CommunicatorPtr> groups_;

  prometheus::Gauge& step_;
  prometheus::Gauge& train_steps_;
  prometheus::Histogram& step_seconds_;
  prometheus::Family<prometheus::Counter>& phase_family_;
  std::vector<std::pair<prometheus::Counter*, double StepReport::*>> phases_;
  // A step's wall time its phases missed (kind "missing") or exceeded
  // ("excess"): nothing closes the breakdown, so misaccounting shows here.
  prometheus::Family<prometheus::Counter>& unaccounted_family_;
  prometheus::Counter& unaccounted_missing_;
  prometheus::Counter& unaccounted_excess_;
  prometheus::Gauge& tokens_per_second_;
  prometheus::Gauge& mfu_;
  prometheus::Gauge& loss_;
  prometheus::Gauge& grad_norm_;
  prometheus::Gauge& learning_rate_;
  prometheus::Family<prometheus::Counter>& comm_seconds_family_;
  prometheus::Family<prometheus::Counter>& comm_bytes_family_;
  prometheus::Family<prometheus::Counter>& comm_ops_family_;
  std::map<std::pair<std::string, std::string>, CommSeries> comm_;
  prometheus::Family<prometheus::Counter>& sync_comm_family_;
  prometheus::Family<prometheus::Counter>& exposed_family_;
  std::map<std::string, SyncSeries> sync_;
  prometheus::Gauge& overlap_ratio_;
  prometheus::Gauge& exposed_last_;
  prometheus::Gauge& buckets_;
  prometheus::Gauge& bucket_cap_bytes_;
  prometheus::Gauge& bucket_cap_step_;
  prometheus::Counter& bucket_cap_rejected_;
  prometheus::Family<prometheus::Histogram>& bucket_reduce_family_;
  prometheus::Family<prometheus::Gauge>& bucket_last_family_;
  std::vector<prometheus::Histogram*> bucket_reduce_;  // by bucket index
  std::vector<prometheus::Gauge*> bucket_last_;        // by bucket index; shrinks on re-bucketing
  prometheus::Counter& isp_prefetch_wait_;
  prometheus::Counter& compute_seconds_;
  prometheus::Counter& wait_seconds_;
  std::vector<std::pair<prometheus::Gauge*, int64_t StepReport::*>> memory_;
  prometheus::Gauge& checkpoint_last_step_;
  prometheus::Gauge& eval_loss_;
  prometheus::Gauge& eval_step_;
};

}  // namespace weft
