#include "metrics/train_metrics.h"

#include <cstdio>
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "train/memory_estimate.h"
#include "weft_contract.h"
#include "weft_metrics.h"
#include "train/trainer.h"  // StrategyTraits

namespace weft {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Registry;

const std::vector<double>& duration_buckets() {
  static const std::vector<double> b = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                        1,     2.5,    5,     10,   25,    60,   120, 300,  600};
  return b;
}

namespace {

namespace cm = contract::metrics;

prometheus::Labels rank_label(int rank) { return {{cm::kLabelRank, std::to_string(rank)}}; }

Family<Gauge>& gauges(Registry& reg, int rank, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Labels(rank_label(rank)).Register(reg);
}
Family<Counter>& counters(Registry& reg, int rank, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Labels(rank_label(rank)).Register(reg);
}
Family<Histogram>& histograms(Registry& reg, int rank, const char* name, const char* help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Labels(rank_label(rank)).Register(reg);
}

// The families the operator reads are registered from their contract entry,
// which must be of the kind registered.
Family<Gauge>& gauges(Registry& reg, int rank, const cm::Family& f, const char* help) {
  if (f.type != cm::Type::Gauge) std::abort();
  return gauges(reg, rank, f.name, help);
}
Family<Counter>& counters(Registry& reg, int rank, const cm::Family& f, const char* help) {
  if (f.type != cm::Type::Counter) std::abort();
  return counters(reg, rank, f.name, help);
}
Family<Histogram>& histograms(Registry& reg, int rank, const cm::Family& f, const char* help) {
  if (f.type != cm::Type::Histogram) std::abort();
  return histograms(reg, rank, f.name, help);
}

std::string double_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Counters only go up: a source that went backwards (it cannot today) is
// ignored rather than turned into a negative increment, which throws.
void advance(Counter& c, double delta) {
  if (delta > 0) c.Increment(delta);
}

}  // namespace

TrainMetrics::TrainMetrics(const WorkerConfig& cfg, int rank, int world,
                           std::vector<comm::CommunicatorPtr> groups, std::shared_ptr<Registry> registry)
    : registry_(registry ? std::move(registry) : std::make_shared<Registry>()),
      rank_(rank),
      step_(gauges(*registry_, rank, cm::kStep,
                   "Optimizer steps completed (1-based; resumes continue the count)")
                .Add({})),
      train_steps_(gauges(*registry_, rank, "weft_train_steps",
                          "Steps the run is configured to train (train.steps)")
                       .Add({})),
      step_seconds_(
          histograms(*registry_, rank, cm::kStepSeconds, "Wall time of one optimizer step")
              .Add({}, duration_buckets())),
      phase_family_(
          counters(*registry_, rank, cm::kPhaseSeconds,
                   "Seconds spent per step phase, each measured, summing to the step's wall time: data, "
                   "forward, backward and optimizer (clip + update), each compute only; exposed_comm "
                   "(compute waiting for communication, wherever it waited); other (rest of the "
                   "step: step agreement, loss all-reduce)")),
      unaccounted_family_(counters(*registry_, rank, "weft_phase_unaccounted_seconds_total",
                                   "Seconds by which the phases of the steps missed (kind missing: time in no "
                                   "phase) or exceeded (kind excess: time counted twice) their wall time; 0 "
                                   "on the CPU up to clock reads (docs/metrics.md)")),
      unaccounted_missing_(unaccounted_family_.Add({{"kind", "missing"}})),
      unaccounted_excess_(unaccounted_family_.Add({{"kind", "excess"}})),
      tokens_per_second_(gauges(*registry_, rank, cm::kTokensPerSecond,
                                "Tokens per second of the whole job in the last step")
                             .Add({})),
      mfu_(gauges(*registry_, rank, "weft_mfu",
                  "Model FLOPs utilisation of this rank in the last step vs metrics.peak_tflops (0 "
                  "when unknown)")
               .Add({})),
      loss_(gauges(*registry_, rank, cm::kLoss,
                   "Training loss of the last step (mean over all ranks' tokens, nats/token)")
                .Add({})),
      grad_norm_(gauges(*registry_, rank, "weft_grad_norm",
                        "Global gradient L2 norm of the last step, before clipping")
                     .Add({})),
      learning_rate_(
          gauges(*registry_, rank, "weft_learning_rate", "Learning rate used by the last step")
              .Add({})),
      comm_seconds_family_(
          counters(*registry_, rank, "weft_comm_seconds_total",
                   "Seconds collectives ran on the comm thread/stream, per op and process group")),
      comm_bytes_family_(counters(
          *registry_, rank, "weft_comm_bytes_total",
          "Bytes of this rank's input buffers passed to collectives, per op and process group")),
      comm_ops_family_(counters(*registry_, rank, "weft_comm_operations_total",
                                "Collectives completed, per op and process group")),
      sync_comm_family_(
          counters(*registry_, rank, "weft_sync_comm_seconds_total",
                   "Seconds the gradient-sync collectives ran (the `comm` of the overlap ratio)")),
      exposed_family_(counters(
          *registry_, rank, cm::kExposedCommSeconds,
          "Seconds compute waited for gradient sync (the `exposed` of the overlap ratio)")),
      overlap_ratio_(gauges(*registry_, rank, cm::kOverlapRatio,
                            "1 - exposed/comm of the last step's gradient sync, clamped to [0, 1]; "
                            "0 without sync")
                         .Add({})),
      exposed_last_(gauges(*registry_, rank, cm::kExposedCommLastStep,
                           "Seconds compute waited for gradient sync in the last step")
                        .Add({})),
      buckets_(gauges(*registry_, rank, "weft_buckets",
                      "Gradient buckets in the current bucketing (design name: bucket count)")
                   .Add({})),
      bucket_cap_bytes_(
          gauges(*registry_, rank, cm::kBucketCapBytes, "Current gradient bucket cap in bytes")
              .Add({})),
      bucket_cap_step_(gauges(*registry_, rank, "weft_bucket_cap_step",
                              "Step whose start applied the current bucket cap (0: the cap since the start); "
                              "equal on every rank for the same cap")
                           .Add({})),
      bucket_cap_rejected_(counters(*registry_, rank, "weft_bucket_cap_rejected_total",
                                    "Bucket caps read from the cap file and rejected (not a number, or "
                                    "outside (0, 64 GiB]); only rank 0 reads the file")
                               .Add({})),
      bucket_reduce_family_(
          histograms(*registry_, rank, "weft_bucket_reduce_seconds",
                     "Run time of one bucket's gradient reduction, per bucket index")),
      bucket_last_family_(gauges(*registry_, rank, "weft_bucket_reduce_last_seconds",
                                 "Run time of each bucket's gradient reduction in the last step")),
      isp_prefetch_wait_(counters(*registry_, rank, "weft_isp_prefetch_wait_seconds_total",
                                  "Seconds compute waited for ISP weight prefetch (stays 0 until "
                                  "the ISP strategy runs)")
                             .Add({})),
      // A straggler computes longer than its gang; the rest of the gang then
      // waits for it in the collectives (weft-operator's spec.stragglers
      // compares these between ranks).
      compute_seconds_(counters(*registry_, rank, cm::kComputeSeconds,
                                "Seconds this rank's steps computed: data, forward, backward and optimizer, "
                                "less the time blocked in collectives within them")
                           .Add({})),
      wait_seconds_(counters(*registry_, rank, cm::kWaitSeconds,
                             "Seconds this rank's steps were blocked in collectives, waiting for "
                             "communication or for the rest of the gang (the step's wall time less compute)")
                        .Add({})),
      checkpoint_last_step_(gauges(*registry_, rank, "weft_checkpoint_last_step",
                                   "Step of the last checkpoint written (0 before the first)")
                                .Add({})),
      eval_loss_(gauges(*registry_, rank, cm::kEvalLoss,
                        "Held-out loss of the last evaluation (eval.every; mean over the eval batches' tokens, "
                        "nats/token; 0 before the first)")
                     .Add({})),
      eval_step_(gauges(*registry_, rank, cm::kEvalStep,
                        "Step after which the last held-out evaluation ran (0 before the first)")
                     .Add({})) {
  for (auto& g : groups) {
    if (g && std::find(groups_.begin(), groups_.end(), g) == groups_.end()) groups_.push_back(g);
  }
  phases_ = {{&phase_family_.Add({{cm::kLabelPhase, cm::kPhaseData}}), &StepReport::data_seconds},
             {&phase_family_.Add({{cm::kLabelPhase, cm::kPhaseForward}}), &StepReport::forward_seconds},
             {&phase_family_.Add({{cm::kLabelPhase, cm::kPhaseBackward}}), &StepReport::backward_seconds},
             {&phase_family_.Add({{cm::kLabelPhase, cm::kPhaseOptimizer}}), &StepReport::optimizer_seconds},
             {&phase_family_.Add({{cm::kLabelPhase, cm::kPhaseExposedComm}}), &StepReport::exposed_comm_seconds},
             {&phase_family_.Add({{cm::kLabelPhase, cm::kPhaseOther}}), &StepReport::other_seconds}};
  auto& memory = gauges(*registry_, rank, "weft_memory_bytes",
                        "Bytes this rank holds per kind: param, grad, optimizer, activation (and isp_pool "
                        "with strategy isp: the gathered full weights of two blocks; device_held and "
                        "device_in_use on cuda: the GPU caching allocator's bytes from the driver and handed out)");
  memory_ = {{&memory.Add({{"kind", "param"}}), &StepReport::memory_param_bytes},
             {&memory.Add({{"kind", "grad"}}), &StepReport::memory_grad_bytes},
             {&memory.Add({{"kind", "optimizer"}}), &StepReport::memory_optimizer_bytes},
             {&memory.Add({{"kind", "activation"}}), &StepReport::memory_activation_bytes}};
  if (strategy_traits(cfg.parallel).weight_pool)
    memory_.push_back({&memory.Add({{"kind", "isp_pool"}}), &StepReport::memory_isp_pool_bytes});
  if (cfg.device == ComputeDevice::Cuda) {
    memory_.push_back({&memory.Add({{"kind", "device_held"}}), &StepReport::memory_device_held_bytes});
    memory_.push_back({&memory.Add({{"kind", "device_in_use"}}), &StepReport::memory_device_in_use_bytes});
  }
  // An info metric (constant 1) lets dashboards label panels by strategy and
  // device with a join instead of guessing from other series.
  gauges(*registry_, rank, "weft_worker_info",
         "Constant 1, labelled with the run's strategy, device and world size")
      .Add({{"strategy", std::string(contract::mode_name(cfg.parallel.strategy))},
            {"device", std::string(contract::mode_name(cfg.device))},
            {"world_size", std::to_string(world)}})
      .Set(1);
  gauges(*registry_, rank, "weft_memory_estimate_bytes",
         "Bytes this rank was estimated to need at its peak before the model was built (weights, "
         "gradients, optimizer state, activations, runtime); compare with weft_memory_bytes")
      .Add({})
      // resolve() is idempotent: a config built in code (tests, benchmarks) may not have been through it.
      .Set(static_cast<double>(estimate_memory(resolved(cfg), world).total()));
  train_steps_.Set(static_cast<double>(cfg.train.steps));
  // comm.simulate: dashboards and benchmarks must be able to tell emulated
  // comm times from real ones.
  const auto& sim = cfg.comm.simulate;
  gauges(*registry_, rank, "weft_comm_simulated",
         "1 when comm.simulate emulates the network (labels: its latency_us and bandwidth_gbps), else 0")
      .Add({{"latency_us", double_label(sim.latency_us)}, {"bandwidth_gbps", double_label(sim.bandwidth_gbps)}})
      .Set(sim.enabled() ? 1 : 0);
}

void TrainMetrics::on_step(const StepReport& r) {
  last_step_ = r.step;
  step_.Set(static_cast<double>(r.step));
  train_steps_.Set(static_cast<double>(r.total_steps));
  step_seconds_.Observe(r.step_seconds);
  double accounted = 0;
  for (auto& [counter, field] : phases_) {
    advance(*counter, r.*field);
    accounted += r.*field;
  }
  // Every phase is measured ("other" too), so nothing makes them sum to the
  // wall time but their being right: what they miss or count twice is kept.
  advance(unaccounted_missing_, r.step_seconds - accounted);
  advance(unaccounted_excess_, accounted - r.step_seconds);
  tokens_per_second_.Set(r.tokens_per_second);
  mfu_.Set(r.mfu);
  loss_.Set(r.loss);
  grad_norm_.Set(r.grad_norm);
  learning_rate_.Set(r.lr);
  for (auto& [gauge, field] : memory_) gauge->Set(static_cast<double>(r.*field));
  advance(isp_prefetch_wait_, r.isp_prefetch_wait_seconds);
  // The compute phases hold no waits for communication (those are
  // exposed_comm's, ISP's weight gathers included).
  const double compute = r.data_seconds + r.forward_seconds + r.backward_seconds + r.optimizer_seconds;
  advance(compute_seconds_, compute);
  advance(wait_seconds_, std::max(0.0, r.step_seconds - compute));

  if (!r.sync_group.empty()) {
    auto it = sync_.find(r.sync_group);
    if (it == sync_.end()) {
      SyncSeries s{&sync_comm_family_.Add({{cm::kLabelGroup, r.sync_group}}),
                   &exposed_family_.Add({{cm::kLabelGroup, r.sync_group}})};
      it = sync_.emplace(r.sync_group, s).first;
    }
    advance(*it->second.sync, r.comm_seconds);
    advance(*it->second.exposed, r.exposed_comm_seconds);
    overlap_ratio_.Set(r.overlap_ratio);
    exposed_last_.Set(r.exposed_comm_seconds);
    update_buckets(r);
  }
  update_comm();
}

void TrainMetrics::update_buckets(const StepReport& r) {
  buckets_.Set(r.bucket_count);
  set_bucket_cap_bytes(static_cast<double>(r.bucket_cap_bytes));
  bucket_cap_step_.Set(static_cast<double>(r.bucket_cap_step));
  advance(bucket_cap_rejected_, static_cast<double>(r.bucket_cap_rejected) - bucket_cap_rejected_.Value());
  const size_t n = r.bucket_seconds.size();
  // After re-bucketing to fewer buckets, the vanished indices' "last step"
  // gauges would show stale values forever: remove them. Their histograms
  // stay, as cumulative history.
  while (bucket_last_.size() > n) {
    bucket_last_family_.Remove(bucket_last_.back());
    bucket_last_.pop_back();
  }
  for (size_t b = 0; b < n; ++b) {
    const prometheus::Labels label{{"bucket", std::to_string(b)}};
    if (b >= bucket_reduce_.size())
      bucket_reduce_.push_back(&bucket_reduce_family_.Add(label, duration_buckets()));
    if (b >= bucket_last_.size()) bucket_last_.push_back(&bucket_last_family_.Add(label));
    bucket_reduce_[b]->Observe(r.bucket_seconds[b]);
    bucket_last_[b]->Set(r.bucket_seconds[b]);
  }
}

void TrainMetrics::update_comm() {
  for (auto& g : groups_) {
    const comm::CommStats stats = g->stats();
    for (const auto& [op, now] : stats.by_op) {
      auto key = std::make_pair(g->name(), op);
      auto it = comm_.find(key);
      if (it == comm_.end()) {
        const prometheus::Labels l{{"op", op}, {"group", g->name()}};
        CommSeries s;
        s.seconds = &comm_seconds_family_.Add(l);
        s.bytes = &comm_bytes_family_.Add(l);
        s.ops = &comm_ops_family_.Add(l);
        it = comm_.emplace(key, s).first;
      }
      CommSeries& s = it->second;
      advance(*s.seconds, now.seconds - s.seen.seconds);
      if (now.bytes > s.seen.bytes)
        advance(*s.bytes, static_cast<double>(now.bytes - s.seen.bytes));
      if (now.count > s.seen.count) advance(*s.ops, static_cast<double>(now.count - s.seen.count));
      s.seen = now;
    }
  }
}

void TrainMetrics::set_bucket_cap_mb(double mb) {
  if (mb > 0) set_bucket_cap_bytes(std::floor(mb * 1024 * 1024));
}

// weft_bucket_cap_bytes's one writer: the cap the strategy resolved at
// start-up, then each step's (a tuned cap from the step it applies on). The
// config's bucket_cap_mb is not written: with auto it is no size at all.
void TrainMetrics::set_bucket_cap_bytes(double bytes) { bucket_cap_bytes_.Set(bytes); }

void register_rank_info(Registry& registry, const std::string& job_uid, int attempt, int rank, int node_rank,
                        int local_rank) {
  prometheus::BuildGauge()
      .Name(cm::kRankInfo.name)
      .Help("Constant 1, labelled with whose rank this is: the TrainingJob's uid (empty outside one), the attempt, "
            "the global rank, the pod's index (node_rank) and the local rank")
      .Register(registry)
      .Add({{cm::kLabelInfoJobUid, job_uid},
            {cm::kLabelInfoAttempt, std::to_string(attempt)},
            {cm::kLabelInfoRank, std::to_string(rank)},
            {cm::kLabelInfoNodeRank, std::to_string(node_rank)},
            {cm::kLabelInfoLocalRank, std::to_string(local_rank)}})
      .Set(1);
}

void TrainMetrics::set_identity(const std::string& job_uid, int attempt, int rank, int node_rank, int local_rank) {
  register_rank_info(*registry_, job_uid, attempt, rank, node_rank, local_rank);
}

void TrainMetrics::set_attention_kernel(const std::string& kernel) {
  gauges(*registry_, rank_, "weft_attention_kernel_info",
         "Constant 1, labelled with the kernels that run attention: cpu, cudnn (cuDNN's fused flash "
         "attention) or simt (weft's CUDA kernels)")
      .Add({{"kernel", kernel}})
      .Set(1);
}

void TrainMetrics::on_checkpoint(int64_t step) {
  checkpoint_last_step_.Set(static_cast<double>(step));
}

void TrainMetrics::on_eval(int64_t step, double loss) {
  eval_loss_.Set(loss);
  eval_step_.Set(static_cast<double>(step));
}

}  // namespace weft
