// The training loop of one rank: data -> forward -> backward (with the
// gradient hook) -> clip and step -> log, with checkpoints and clean stops.
//
// Owns the parameter/gradient buffer, the model, the gradient sync strategy
// (which owns the optimizer), the step boundary, the data source and the
// run's accounting. Strategy choices live in make_grad_sync and its
// StrategyTraits, checkpoints in RunCheckpoints (train/checkpoint.h), not here.
// Invariants: the batch of (step, micro) is a pure function of the config, so
// a run resumed from a checkpoint at step k reproduces the uninterrupted run's
// losses exactly on the CPU; a stop request is honoured at a step boundary,
// after a checkpoint is written.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm_context.h"
#include "comm/communicator.h"
#include "data/source.h"
#include "model/llama.h"
#include "model/param_and_grad_buffer.h"
#include "optim/adamw.h"
#include "parallel/grad_sync.h"
#include "parallel/strategy_factory.h"
#include "parallel/step_boundary.h"
#include "config/config.h"
#include "train/step_clock.h"
#include "train/step_report.h"

namespace weft {

class RunCheckpoints;  // train/checkpoint.h

// The loss became NaN or infinite: the run diverged. From the same
// checkpoint and config it diverges the same way (training is
// deterministic), so the worker exits kExitDiverged, which is not retried.
struct DivergedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
enum class CheckpointKind : int;

struct TrainSummary {
  int64_t start_step = 0;      // 0, or the step a checkpoint resumed at
  int64_t steps_done = 0;      // steps completed (== config steps unless stopped)
  double final_loss = 0;       // loss of the last step
  double tail_loss = 0;        // mean loss of the last min(10, steps) steps
  double entropy_floor = -1;   // nats/token a perfect model reaches, -1 unknown
  double tokens_per_second = 0;
  double wall_seconds = 0;
  int64_t tokens = 0;          // tokens processed by all ranks in this run
  int64_t num_params = 0;
  int64_t peak_rss_bytes = 0;
  bool stopped_early = false;  // a stop request ended the run
  std::string last_checkpoint;
  std::vector<double> losses;        // per step of this run
  std::vector<double> step_seconds;  // wall time of each step of this run
  // Gradient sync (docs/metrics.md, "Overlap"): per step of this run; empty
  // when training alone.
  std::vector<double> comm_seconds, exposed_seconds;
  std::vector<double> bucket_seconds;  // per bucket, summed over the run
  // ISP, per step of this run: weight all-gather run time and the time
  // compute waited for it (the exposed prefetch wait).
  std::vector<double> isp_gather_seconds, isp_prefetch_wait_seconds;
  // Held-out evaluations of this run (eval.every): after which step, and the loss.
  std::vector<int64_t> eval_steps;
  std::vector<double> eval_losses;
  int bucket_count = 0;
  double bucket_cap_mb = 0;
  double overlap_ratio() const;        // 1 - sum(exposed) / sum(comm), 0 without comm
  // Seconds spent per phase over the run: data, forward, backward, optimizer
  // (clip + AdamW), each compute only (its waits for communication are the
  // strategy's exposed comm), other (the rest of the step), and checkpoint.
  StateBytes memory;                 // this rank's parameter, gradient and optimizer bytes at the end
  ops::CudaMemory device_memory;     // GPU allocator's bytes, peaks since the loop began (cuda only)
  double data_seconds = 0, forward_seconds = 0, backward_seconds = 0, optimizer_seconds = 0,
         other_seconds = 0, checkpoint_seconds = 0;
  std::vector<StepPhases> step_phases;  // per step of this run, as reported (StepReport)
  // Steps whose phases missed their wall time by more than
  // phase_sum_tolerance (train/step_clock.h): time counted twice or not at all.
  int64_t misaccounted_steps = 0;
};

// One held-out evaluation (eval.*): the mean loss over the eval batches'
// tokens, every rank's share included.
struct EvalResult {
  double loss = 0;
  int batches = 0;
  int64_t tokens = 0;  // held-out tokens evaluated, all ranks
  double seconds = 0;
  bool stopped = false;  // a stop request ended it early: no loss
};

// This rank's place in the job. dp == nullptr (or of size 1) trains alone.
struct TrainerComm {
  int rank = 0;
  int world = 1;
  comm::CommunicatorPtr dp;              // data-parallel group
  comm::CommContext* context = nullptr;  // failure messages name the step
  // ISP (parallel.strategy isp): sequence-, weight- and weight-data-parallel
  // groups of the rank grid; null when of size 1 or unused.
  comm::CommunicatorPtr sp, wp, wdp;
};

class Trainer {
 public:
  // Trains resolved(cfg) (config/config.h): weft-worker hands it a resolved
  // config; one built in code has its autos decided by the same resolve().
  // Passes train.attention to the kernels (ops::set_attention_mode).
  explicit Trainer(const WorkerConfig& cfg, TrainerComm comm = {});
  ~Trainer();

  // Trains until config steps or *stop becomes non-zero. `started` is called
  // once, when the ranks agree where they start and before the first step:
  // from then on a stop is a checkpoint, before it there is nothing to save
  // (the caller's signal handling changes there). Throws ConfigError,
  // DataError or CheckpointError for the caller to map to an exit code.
  TrainSummary run(const std::atomic<int>* stop = nullptr, const std::function<void()>& started = {});

  // Held-out evaluation (eval.*): the same eval.batches micro-batches every
  // time (batch k is rows [k B, (k+1) B) of the held-out stream, whatever the
  // world size), forward only: no gradient, optimizer or data-order state is
  // touched, so training is the same with and without it. Data rank r of W
  // evaluates batches r, r+W, ...; every rank runs the same number of
  // forwards (ISP's forwards are collectives: a rank without a batch left
  // repeats batch 0 and does not count it), and the sums are reduced over
  // every rank. Collective over the job's groups. A stop request (*stop
  // non-zero on any rank) is agreed before every forward: every rank leaves
  // at the same batch and the result is `stopped`, without a loss.
  EvalResult evaluate(const std::atomic<int>* stop = nullptr);
  // weft-worker --eval: the weights of a Hugging Face directory (or an
  // exported checkpoint), then evaluate(). One rank.
  EvalResult evaluate_hf(const std::string& dir, const std::atomic<int>* stop = nullptr);

  Llama& model() { return model_; }
  GradSync& grad_sync() { return *sync_; }
  AdamW& optimizer() { return sync_->state().optimizer(); }
  // Receives a StepReport after every step (the metrics unit); not owned.
  void set_observer(StepObserver* o) { observer_ = o; }
  // Model FLOPs per token for forward + backward (6N plus attention).
  double flops_per_token() const;
  const TokenSource& data() const { return *source_; }
  // The kernels that run the model's attention in this run ("cpu", "cudnn",
  // "simt") and why, decided when the trainer is built.
  const ops::AttentionKernel& attention_kernel() const { return attention_; }

 private:
  std::string checkpoint_dir() const;
  // The full model for init, init_from and checkpoints: the model itself
  // when its weights are f32 host memory held whole, else a host f32 full
  // copy that the strategy loads from and gathers into (via_full()).
  void init_weights();
  bool via_full() const;
  // Sequence-parallel ranks per sequence (1 unless the strategy splits sequences).
  int sp() const { return rank_.sp ? rank_.sp->size() : 1; }
  void init_from_hf(const std::string& dir);  // throws ConfigError for a bad directory
  // The step training starts at: a resumed checkpoint's, else 0 (from
  // init_from's weights when set). Loads where this rank starts
  // (load_start), then checks with the others that they start at the same
  // step from the same checkpoint (agree_on_start throws CheckpointError
  // naming each rank's start when they do not).
  int64_t resume_or_init(TrainSummary& s);
  int64_t load_start(TrainSummary& s);
  void agree_on_start(int64_t step);
  void log_start(const TrainSummary& s) const;
  // Reads held-out batch 0 into batch_: DataError naming eval.shards for
  // held-out data that cannot give a row (a shard shorter than seq_len + 1).
  void read_first_eval_batch();
  ops::AttentionKernel attention_;
  // Stop requests and bucket caps agreed by every rank; false: stop now.
  bool agree_at_boundary(int64_t step, const std::atomic<int>* stop);
  // Forward and backward over the step's micro-batches, gradients synced;
  // returns the loss averaged over them and the ranks. A step of many
  // micro-batches agrees on stop requests every kStopCheckMicroBatches of
  // them; when one was made it returns nullopt with the step unfinished
  // (no optimizer step: the weights are those of the step before).
  std::optional<double> forward_backward(int64_t step, StepClock& clock, const std::atomic<int>* stop);
  static constexpr int kStopCheckMicroBatches = 8;
  // This rank's part of micro-batch (step, micro): the whole sequences, or
  // its positions of each when sequences are split.
  void read_micro_batch(int64_t step, int micro, const int32_t*& in, const int32_t*& tgt);
  // The batch's document starts (data.document_boundaries eos), else null:
  // for the whole sequences, also when this rank holds a slice of each.
  const int32_t* doc_starts() const { return batch_.doc_starts.empty() ? nullptr : batch_.doc_starts.data(); }
  // This rank's positions of `batch_` (all of them unless sequences are split).
  void this_ranks_positions(const int32_t*& in, const int32_t*& tgt);
  void record_sync(TrainSummary& s) const;
  StepReport step_report(int64_t step, double loss, double lr, double norm, const StepClock& clock) const;
  // The step's report into the summary: loss, wall time, phases; a step
  // whose phases miss its wall time by more than phase_sum_tolerance is
  // counted and, the first time, logged (on the CPU: on a GPU exposed comm
  // is device time, the other phases host time).
  void record_step(TrainSummary& s, const StepReport& r) const;

  // The named steps of run(). begin_run: log, resume or initialise, agree on
  // the start, call `started`, start the strategy and return the GPU
  // allocator's init blocks (release_init_blocks).
  void begin_run(TrainSummary& s, const std::function<void()>& started);
  void release_init_blocks() const;
  // One optimizer step, timed by phase; nullopt: a stop request ended the
  // run before it (at the boundary) or inside it (the step is abandoned).
  // Throws DivergedError when the loss is not finite.
  std::optional<StepReport> train_step(int64_t step, TrainSummary& s, const std::atomic<int>* stop);
  // The observer and the progress line, after a step.
  void publish_step(const StepReport& r, const TrainSummary& s, double elapsed) const;
  // The held-out evaluation due after step index `step` (eval.every, and
  // after the last step), if any.
  enum class EvalOutcome { NotDue, Done, Stopped, StoppedAfterLast };
  EvalOutcome evaluate_after(int64_t step, double train_loss, TrainSummary& s, const std::atomic<int>* stop);
  // After the loop: the last checkpoint, the summary's totals, the end of
  // the log and summary.json.
  void end_run(TrainSummary& s, int64_t step, double wall_seconds);
  // Checkpoints: save, publish one written in the background (collective;
  // after every step), and log/observe one that was published.
  void save(TrainSummary& s, int64_t steps_completed, double last_loss, CheckpointKind kind);
  void publish_pending(TrainSummary& s);
  void report(TrainSummary& s, const std::string& path, int64_t step, double seconds);
  // The summary's totals once the loop ended at `step`.
  void finish(TrainSummary& s, int64_t step, double wall_seconds);
  void log_end(const TrainSummary& s) const;
  void log_progress(const StepReport& r, double elapsed, int64_t steps_this_run) const;
  void write_summary(const TrainSummary& s) const;
  // Tokens of one micro-batch on this rank (T: its positions).
  int64_t micro_batch_tokens() const { return int64_t(cfg_.train.micro_batch) * (cfg_.train.seq_len / sp()); }

  WorkerConfig cfg_;
  TrainerComm rank_;
  StrategyTraits traits_;
  std::unique_ptr<TokenSource> source_;
  std::unique_ptr<TokenSource> eval_source_;  // eval.every > 0, or made by the first evaluate()
  std::shared_ptr<ParamAndGradBuffer> buffer_;
  Llama model_;
  std::unique_ptr<GradSync> sync_;
  std::unique_ptr<RunCheckpoints> checkpoints_;
  int64_t saved_step_ = -1;  // steps completed at the last save() on every rank
  uint32_t start_checkpoint_ = 0;  // identity of the checkpoint resumed from; 0: none
  double start_loss_ = 0;          // the loss recorded in that checkpoint
  StepBoundary boundary_;
  int64_t cap_step_ = 0;  // step that applied the current bucket cap (StepReport::bucket_cap_step)
  StepObserver* observer_ = nullptr;
  // Test hook (WEFT_TEST_DROP_PHASE, the negative control of
  // tests/metrics/phase_sum_test.cc): a phase every step reports as 0.
  double StepReport::*dropped_phase_ = nullptr;
  Batch batch_;
  std::vector<int32_t> inputs_, targets_;  // this rank's positions when sequences are split
};

}  // namespace weft
