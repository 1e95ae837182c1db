// GradSync: what the trainer drives, for every strategy and device, between a
// backward pass and the next forward: gradient synchronisation, the global
// gradient norm and clipping, and the optimizer step (a sharded strategy owns
// its optimizer state, so the step belongs here too).
//
// Protocol of one optimizer step (the trainer's loop, see docs/architecture/seams.md):
//   prepare_step(lr, max_norm)               the step's settings, before forward
//   for each micro-batch m of M:
//     begin_micro_batch(last = m == M-1)
//     model.backward(.., on_grad_ready)      gradients accumulate in the buffer;
//                                            a strategy may launch reductions
//     loss = finish_micro_batch(loss)        the last one returns the loss
//                                            averaged over the data-parallel ranks
//   norm = clip_and_step(lr, max_norm)       global norm before clipping
//
// Implementations: LocalGradSync (one rank, parallel/local_sync.h),
// DataParallel (bucketed all-reduce), ZeroGradSync (sharded optimizer state,
// parallel/zero.h), IspGradSync (parallel/isp.h);
// parallel/strategy_factory.h builds the config's. A strategy is composed of
// members: a gradient reducer (parallel/bucket_reducer.h, over the bucket
// engine) and an optimizer placement, replicated
// (parallel/replicated_optimizer.h) or sharded (parallel/sharded_optimizer.h),
// which is the StrategyState (parallel/sync_state.h) checkpoints go through;
// state() returns it. Nothing is shared through a base but this protocol.
// Invariants: every rank of a group calls the same methods in the same order
// (collectives are issued in that order); on_grad_ready(i) is called once per
// parameter per micro-batch, in the model's backward order.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "model/param_and_grad_buffer.h"
#include "model/sequence_exchange.h"
#include "optim/adamw.h"
#include "parallel/sync_state.h"

namespace weft {

// The wall time during which at least one of a step's collectives ran: the
// union of their [start, end) spans. Collectives on different Gloo lanes run
// at once, so the sum of their run times would count the same second twice
// and credit the overlap ratio with comm hidden behind other comm, not behind
// compute. Spans come from the issue time plus the Work's queueing and run
// times (on the comm thread's clock, like the Work's own figures).
class CommSpans {
 public:
  using Clock = std::chrono::steady_clock;
  // `w` has completed; `issued` is when it was handed to the communicator.
  void add(Clock::time_point issued, comm::Work& w);
  // Another recorder's spans (e.g. an inner strategy's buckets under ISP's
  // gathers), so the union covers both.
  void add(const CommSpans& other);
  double busy_seconds() const;
  // The spans as [start, end) on the steady clock, in the order they were
  // added: where each collective ran against compute (the overlap tests).
  std::vector<std::pair<Clock::time_point, Clock::time_point>> intervals() const;
  void clear() { spans_.clear(); }

 private:
  std::vector<std::pair<double, double>> spans_;  // seconds since epoch_
  Clock::time_point epoch_ = Clock::now();
};

// Communication accounting of one optimizer step (docs/metrics.md, "Overlap").
struct StepCommStats {
  double comm_seconds = 0;             // wall time some collective of the step ran (CommSpans)
  double exposed_seconds = 0;          // time compute waited for them
  std::vector<double> bucket_seconds;  // reduce time per bucket
  // A strategy's own kinds of communication beside its buckets, part of the
  // above, by name: how long each ran (the union of its spans, like comm) and
  // how long compute waited for it. ISP names "weight_gather" (the exposed
  // prefetch wait), "reduce_scatter" (over wp) and "all_to_all" (always
  // exposed); docs/metrics.md.
  struct Part {
    double seconds = 0, wait_seconds = 0;
  };
  std::map<std::string, Part> parts;
  Part part(const std::string& name) const {
    auto it = parts.find(name);
    return it == parts.end() ? Part{} : it->second;
  }
  CommSpans spans;  // the spans behind comm_seconds, for a wrapping strategy's union (ISP)
  double overlap_ratio() const {
    if (comm_seconds <= 0) return 0;
    double r = 1.0 - exposed_seconds / comm_seconds;
    return r < 0 ? 0 : (r > 1 ? 1 : r);
  }
};

// Bytes one rank holds for the model's state (weft_memory_bytes{kind}).
struct StateBytes {
  int64_t params = 0, grads = 0, optimizer = 0;
  // A strategy's own kinds of memory beside those, by name (ISP: "isp_pool",
  // the double-buffered full-weight pool); weft_memory_bytes{kind}.
  std::map<std::string, int64_t> other;
  int64_t other_bytes(const std::string& kind) const {
    auto it = other.find(kind);
    return it == other.end() ? 0 : it->second;
  }
};

// How far the global gradient norm reaches beyond the sync group. ISP syncs
// each weight shard over wdp, but the norm spans every shard of the model: the
// squared norm is also summed over `across` (wp), with the parameters that are
// replicated across it (norm weights) counted once. Empty: the group's norm.
struct NormScope {
  comm::CommunicatorPtr across;
  Device device = Device::CPU;   // where across's collectives take their tensors
  std::vector<char> replicated;  // per parameter of the buffer: 1 = replicated across `across`
  bool active() const { return across && across->size() > 1; }
  // Weight of parameter i's squared norm on this rank.
  double weight(int param) const;
  // Sum of `sumsq` over `across` (collective; a no-op when inactive).
  double reduce(double sumsq) const;
};

// What a strategy reports of itself: the trainer's step report and metrics,
// the startup log, the bucket cap the ranks agree on (GradSync::report).
struct SyncReport {
  const comm::Communicator* group =
      nullptr;  // gradients are synchronised over it; nullptr when alone
  const StepCommStats* last_step = nullptr;  // the last step's accounting (never null)
  int bucket_count = 0;                      // 0 for a strategy without buckets
  double bucket_cap_mb = 0;
  StateBytes memory;        // weft_memory_bytes{kind}
  std::string description;  // one line for the startup log; only from described()
};

class GradSync {
 public:
  virtual ~GradSync() = default;

  // Set once, before start(); see NormScope.
  void set_norm_scope(NormScope scope) { norm_scope_ = std::move(scope); }

  // After initialisation or a checkpoint load, before the first step: makes
  // every rank hold the same working parameters (rank 0's). The optimizer's
  // master copy is not touched: it comes from load_full_weights.
  virtual void start() = 0;

  // Before the first micro-batch of a step: the learning rate and clip norm
  // clip_and_step will be called with (a strategy that steps during backward,
  // ZeRO's interleaved mode, needs them early).
  virtual void prepare_step(double lr, double max_norm) {
    (void)lr;
    (void)max_norm;
  }
  virtual void begin_micro_batch(bool last) = 0;
  virtual void on_grad_ready(int param) = 0;
  // `loss` is this rank's loss accumulated over the micro-batches so far;
  // returns it averaged over the ranks after the last micro-batch (unchanged
  // before). On the last micro-batch, returns once the gradients are ready for
  // clip_and_step.
  virtual double finish_micro_batch(double loss) = 0;
  // Global L2 norm of the synchronised gradients (before clipping); scales
  // them to max_norm when larger (max_norm > 0); one optimizer step at lr.
  virtual double clip_and_step(double lr, double max_norm) = 0;

  // A bucket cap agreed by every rank at the boundary before 0-based `step`
  // (StepBoundary); strategies without buckets ignore it.
  virtual void rebucket(double cap_mb, int64_t step) {
    (void)cap_mb;
    (void)step;
  }

  // The accounting of the last step and what the metrics name, every step;
  // described() adds the startup log's line (formatted only when asked).
  SyncReport report() const { return make_report(false); }
  SyncReport described() const { return make_report(true); }

  // What the strategy keeps between steps: optimizer, full weights, shards
  // (parallel/sync_state.h); checkpoints and initial weights go through it.
  StrategyState& state() { return *state_; }
  const StrategyState& state() const { return *state_; }

  // A strategy that splits sequences (ISP with sp > 1) gives the model its
  // attention exchange; nullptr otherwise.
  SequenceExchange* sequence_exchange() const { return exchange_; }

 protected:
  // `state` is a member of the derived strategy (only its address is taken
  // here, before it is constructed).
  explicit GradSync(StrategyState& state) : state_(&state) {}
  void set_sequence_exchange(SequenceExchange* exchange) { exchange_ = exchange; }
  const NormScope& norm_scope() const { return norm_scope_; }
  virtual SyncReport make_report(bool describe) const = 0;

 private:
  NormScope norm_scope_;
  StrategyState* state_;
  SequenceExchange* exchange_ = nullptr;
};

// load_full_weights of the strategies whose buffer holds every weight (local,
// dp, zero): working weights = full (rounded to the working dtype), master =
// full exactly, for opt's ranges (ZeRO's are its owned ranges).
void load_replicated_weights(ParamAndGradBuffer& buffer, AdamW& opt,
                             const ParamAndGradBuffer& full);

}  // namespace weft
