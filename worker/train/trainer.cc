#include "train/trainer.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <utility>

#include "config/hf_config.h"
#include "kernels/stream_timer.h"
#include "parallel/host_scalars.h"
#include "train/checkpoint.h"
#include "train/output_dirs.h"
#include "train/device.h"
#include "train/hf_weights.h"
#include "train/memory_estimate.h"

namespace weft {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Test hook: WEFT_TEST_DROP_PHASE names a phase (data, forward, backward,
// optimizer, exposed_comm, other) that every step then reports as 0, as a
// trainer that forgot to time it would. tests/metrics/phase_sum_test.cc's
// negative control: its per-step check must catch it.
double StepReport::*dropped_phase_for_test() {
  const char* name = std::getenv("WEFT_TEST_DROP_PHASE");
  if (!name || !*name) return nullptr;
  const std::pair<const char*, double StepReport::*> phases[] = {
      {"data", &StepReport::data_seconds},           {"forward", &StepReport::forward_seconds},
      {"backward", &StepReport::backward_seconds},   {"optimizer", &StepReport::optimizer_seconds},
      {"exposed_comm", &StepReport::exposed_comm_seconds}, {"other", &StepReport::other_seconds}};
  for (const auto& [phase, field] : phases)
    if (std::string_view(name) == phase) {
      spdlog::warn("WEFT_TEST_DROP_PHASE={}: every step reports its {} time as 0 (a test hook)", name, name);
      return field;
    }
  return nullptr;
}

std::string hms(double s) {
  long t = std::lround(std::max(0.0, s));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

int64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace

double TrainSummary::overlap_ratio() const {
  double comm = 0, exposed = 0;
  for (double c : comm_seconds) comm += c;
  for (double e : exposed_seconds) exposed += e;
  return comm > 0 ? std::clamp(1.0 - exposed / comm, 0.0, 1.0) : 0.0;
}

Trainer::Trainer(const WorkerConfig& cfg, TrainerComm comm)
    : cfg_(resolved(cfg)),
      rank_(std::move(comm)),
      traits_(strategy_traits(cfg_.parallel)),
      source_(make_source(cfg_)),
      buffer_(std::make_shared<ParamAndGradBuffer>(llama_param_table(cfg_.model), working_dtype(cfg_),
                                                   model_device(cfg_), model_storage(cfg_.parallel))),
      model_(cfg_.model, buffer_),
      sync_(make_grad_sync(cfg_, buffer_, SyncGroups{rank_.dp, rank_.sp, rank_.wp, rank_.wdp})),
      boundary_(rank_.dp, cfg_.parallel.bucket_cap_file, model_device(cfg_)) {
  if (source_->vocab_size() > cfg_.model.vocab_size)
    throw ConfigError("model.vocab_size: " + std::to_string(cfg_.model.vocab_size) +
                      " is smaller than the data's vocabulary (" +
                      std::to_string(source_->vocab_size()) + " tokens in " + source_->describe() +
                      ")");
  model_.set_sequence_exchange(sync_->sequence_exchange());
  model_.set_recompute_blocks(traits_.recompute_blocks);
  model_.set_recompute_pointwise(cfg_.train.recompute == Recompute::Pointwise);
  model_.set_logits_chunk_rows(logits_chunk_rows(cfg_.train.logits_chunk_mb, buffer_->device() == Device::CUDA,
                                                           cfg_.model.vocab_size,
                                                           static_cast<int>(dtype_size(buffer_->param_dtype()))));
  ops::set_attention_mode(attention_mode(cfg_));
  attention_ = model_.attention_kernel(cfg_.train.micro_batch, cfg_.train.seq_len / sp(),
                                       cfg_.data.packs_documents());
  if (!attention_.error.empty()) throw ConfigError(attention_.error);
  init_weights();
  // Held-out data that cannot be read is bad input now, not after hours:
  // its first batch is read here (a shard shorter than a row is refused).
  if (cfg_.eval.every > 0) {
    eval_source_ = make_eval_source(cfg_);
    read_first_eval_batch();
  }
  checkpoints_ = std::make_unique<RunCheckpoints>(cfg_, checkpoint_dir(), sync_->state(), model_, via_full(),
                                                  rank_.rank, rank_.world, rank_.dp.get());
  dropped_phase_ = dropped_phase_for_test();
}

Trainer::~Trainer() = default;

bool Trainer::via_full() const {
  return traits_.shards_weights || buffer_->param_dtype() != DType::F32 || buffer_->device() != Device::CPU;
}

void Trainer::init_weights() {
  if (!via_full()) return model_.init(cfg_.train.seed);
  // Every rank draws the same f32 weights on the host and keeps its part, in
  // its working dtype and on its device; the master copy keeps the f32 draw.
  // ISP and ZeRO draw just their part, one tensor at a time.
  load_weights_into(InitialWeights(cfg_.model, cfg_.train.seed), sync_->state(), model_, true);
}

void Trainer::init_from_hf(const std::string& dir) {
  // A bad init_from directory is bad input (exit 1), not checkpoint I/O: the
  // config may have been built without parse_config, so check it again here.
  const HfModelConfig hf = read_hf_config(dir);
  const auto diff = hf_model_mismatches(hf, cfg_.model);
  if (!diff.empty()) throw ConfigError(diff.front().path + ": " + diff.front().message);
  try {
    // A rank whose strategy shards the weights (ISP) or the master copy
    // (ZeRO) reads only its byte ranges of the files.
    const HfWeights w = HfWeights::open(dir);
    check_hf_weights(w, model_.params(), cfg_.model.tie_embeddings);
    load_weights_into(HfWeightSource(w, model_.params()), sync_->state(), model_, via_full());
    spdlog::info("initialized {} parameters from {} ({} file{}, stored as {}); optimizer fresh, step 0",
                 model_.num_params(), dir, w.files().size(), w.files().size() == 1 ? "" : "s",
                 w.entry(model_.params().front().name).dtype);
  } catch (const CheckpointError& e) {
    throw ConfigError(std::string("init_from: ") + e.what());
  }
}

std::string Trainer::checkpoint_dir() const {
  return weft::checkpoint_dir(cfg_);
}

double Trainer::flops_per_token() const {
  const ModelConfig& m = cfg_.model;
  // 6 per parameter (forward 2, backward 4) on the matmul weights, plus the
  // attention scores and values: 12 * layers * n_heads * head_dim * seq_len.
  double n = static_cast<double>(model_.num_params());
  if (!m.tie_embeddings) n -= double(m.vocab_size) * m.d_model;  // lookup, not a matmul
  return 6.0 * n + 12.0 * m.n_layers * double(m.n_heads) * m.head_dim() * cfg_.train.seq_len;
}

void Trainer::log_progress(const StepReport& r, double elapsed, int64_t steps_this_run) const {
  const double eta = elapsed / std::max<int64_t>(1, steps_this_run) * (r.total_steps - r.step);
  std::string sync;
  if (!r.sync_group.empty())
    sync = fmt::format(" | comm {:.1f} ms, exposed {:.1f} ms, overlap {:.2f}", r.comm_seconds * 1e3,
                       r.exposed_comm_seconds * 1e3, r.overlap_ratio);
  spdlog::info("step {:>{}}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s{} | ETA {}",
               r.step, std::to_string(r.total_steps).size(), r.total_steps, r.loss, r.lr, r.grad_norm,
               r.tokens_per_second, sync, hms(eta));
}

int64_t Trainer::resume_or_init(TrainSummary& s) {
  const int64_t step = load_start(s);
  agree_on_start(step);
  return step;
}

void Trainer::agree_on_start(int64_t step) {
  // Every rank must start where the others do, from the same checkpoint;
  // checked before the first step, whose collectives would otherwise run in
  // lock-step over different steps and weights.
  const std::vector<StartPoint> all = boundary_.start_points({step, start_checkpoint_});
  if (std::all_of(all.begin(), all.end(), [&](const StartPoint& p) { return p == all.front(); })) return;
  std::string each;
  for (size_t r = 0; r < all.size(); ++r)
    each += fmt::format("{}rank {}: {}", r ? "; " : "", r,
                        all[r].checkpoint || all[r].step ? fmt::format("step {} (checkpoint {:08x})", all[r].step, all[r].checkpoint)
                                          : std::string("no checkpoint (step 0)"));
  throw CheckpointError(fmt::format(
      "the ranks would resume from different checkpoints ({}); this rank read {}. Give every rank the same "
      "checkpoint.dir (a volume they all mount), or remove the stale one",
      each, checkpoints_->dir()));
}

int64_t Trainer::load_start(TrainSummary& s) {
  if (cfg_.checkpoint.resume) {
    if (const auto meta = checkpoints_->resume()) {
      spdlog::info("resumed from {}/step-{} (loss {:.4f})", checkpoints_->dir(), meta->step, meta->last_loss);
      // A stop before the first step has this checkpoint already.
      saved_step_ = meta->step;
      start_checkpoint_ = meta->identity;
      s.last_checkpoint = fmt::format("{}/step-{}", checkpoints_->dir(), meta->step);
      start_loss_ = meta->last_loss;
      return meta->step;
    }
  }
  // A run started from HF weights that has checkpointed since resumes from
  // its own checkpoint above; init_from only seeds step 0.
  if (!cfg_.init_from.empty()) init_from_hf(cfg_.init_from);
  return 0;
}

void Trainer::log_start(const TrainSummary& s) const {
  spdlog::info("model: {} parameters ({} layers, d_model {}, heads {}/{} kv, ffn {}, vocab {})",
               s.num_params, cfg_.model.n_layers, cfg_.model.d_model, cfg_.model.n_heads,
               cfg_.model.n_kv_heads, cfg_.model.ffn(), cfg_.model.vocab_size);
  spdlog::info("data: {}", source_->describe());
  if (eval_source_)
    spdlog::info("eval: every {} steps and after the last, {} held-out batches of {} x {} tokens from {}",
                 cfg_.eval.every, cfg_.eval.batches, cfg_.train.micro_batch, cfg_.train.seq_len,
                 eval_source_->describe());
  spdlog::info("attention: {} ({})", attention_.name, attention_.detail);
  const int64_t rows = model_.logits_chunk_rows();
  spdlog::info("activations: {}; logits {}{}",
               model_.recompute_pointwise() ? "norm outputs and SwiGLU products recomputed in backward (train.recompute)"
                                            : "all kept for backward",
               rows > 0 ? std::to_string(rows) + " rows at a time" : "whole",
               model_.recompute_blocks() > 0
                   ? "; blocks 0.." + std::to_string(model_.recompute_blocks() - 1) + " recomputed whole"
                   : "");
  if (const SyncReport sync = sync_->described(); sync.group) spdlog::info("{}", sync.description);
}

bool Trainer::agree_at_boundary(int64_t step, const std::atomic<int>* stop) {
  // Every rank stops, and switches bucket caps, at the same step.
  const double before = sync_->report().bucket_cap_mb;
  const StepAgreement agreed = boundary_.agree(stop && stop->load(), before);
  if (agreed.stop) return false;
  if (agreed.new_cap_mb > 0) {
    sync_->rebucket(agreed.new_cap_mb, step);
    cap_step_ = step + 1;
    spdlog::info("rank {}: bucket cap {:.6g} -> {:.6g} MiB from step {} (agreed by all ranks)", rank_.rank, before,
                 agreed.new_cap_mb, step + 1);
  }
  return true;
}

void Trainer::read_micro_batch(int64_t step, int micro, const int32_t*& in, const int32_t*& tgt) {
  const TrainConfig& t = cfg_.train;
  // With sequence parallelism the sp ranks of a dp index read the same
  // sequences and each keeps its seq_len/sp positions (this_ranks_positions).
  const int B = t.micro_batch;
  const int data_rank = rank_.rank / sp(), data_world = rank_.world / sp();
  source_->fill(batch_, B, t.seq_len, BatchIndex{step, micro, t.grad_accum, data_rank, data_world});
  this_ranks_positions(in, tgt);
}

void Trainer::this_ranks_positions(const int32_t*& in, const int32_t*& tgt) {
  const TrainConfig& t = cfg_.train;
  const int B = t.micro_batch, T = t.seq_len / sp();
  in = batch_.inputs.data();
  tgt = batch_.targets.data();
  if (sp() == 1) return;
  const int sp_rank = rank_.sp->rank();
  inputs_.resize(size_t(B) * T);
  targets_.resize(size_t(B) * T);
  for (int b = 0; b < B; ++b) {
    const size_t from = size_t(b) * t.seq_len + size_t(sp_rank) * T;
    std::copy_n(batch_.inputs.begin() + from, T, inputs_.begin() + size_t(b) * T);
    std::copy_n(batch_.targets.begin() + from, T, targets_.begin() + size_t(b) * T);
  }
  in = inputs_.data();
  tgt = targets_.data();
}

void Trainer::read_first_eval_batch() {
  try {
    eval_source_->fill(batch_, cfg_.train.micro_batch, cfg_.train.seq_len, BatchIndex{0, 0, 1, 0, 1});
  } catch (const DataError& e) {
    const std::string what = e.what();
    throw DataError(what.rfind("eval.shards", 0) == 0 ? what : "eval.shards: " + what);
  }
}

EvalResult Trainer::evaluate(const std::atomic<int>* stop) {
  if (!eval_source_) {
    eval_source_ = make_eval_source(cfg_);
    read_first_eval_batch();
  }
  const auto t0 = Clock::now();
  const TrainConfig& t = cfg_.train;
  const int B = t.micro_batch, T = t.seq_len / sp();
  const int data_rank = rank_.rank / sp(), data_world = rank_.world / sp();
  const int n = cfg_.eval.batches;
  const int forwards = (n + data_world - 1) / data_world;
  double sum = 0;
  for (int j = 0; j < forwards; ++j) {
    // eval.batches may be large: a stop is answered within
    // kStopCheckMicroBatches forwards (the agreement is a collective; every
    // rank runs the same number of forwards).
    if (j % kStopCheckMicroBatches == 0 && boundary_.any_stop(stop && stop->load() != 0)) {
      EvalResult r;
      r.stopped = true;
      r.seconds = seconds_since(t0);
      return r;
    }
    const int k = data_rank + j * data_world;
    const bool counted = k < n;
    // Batch k of the fixed set: rows [k B, (k+1) B) of the held-out stream.
    eval_source_->fill(batch_, B, t.seq_len, BatchIndex{counted ? k : 0, 0, 1, 0, 1});
    const int32_t *in = nullptr, *tgt = nullptr;
    this_ranks_positions(in, tgt);
    const double loss = model_.forward(in, tgt, B, T, doc_starts());
    if (counted) sum += loss;
  }
  // Every (batch, sequence slice) was evaluated by exactly one rank: the sum
  // over every rank (rank_.dp is the whole job: plain data parallelism, or
  // the world for the grid strategies) is the sum over batches of sp slice means.
  float wire = static_cast<float>(sum);
  if (rank_.dp && rank_.dp->size() > 1)
    all_reduce_host(*rank_.dp, buffer_->device(), &wire, 1, comm::ReduceOp::Sum, "eval loss")->wait();
  EvalResult r;
  r.loss = static_cast<double>(wire) / (double(n) * sp());
  r.batches = n;
  r.tokens = int64_t(n) * B * t.seq_len;
  r.seconds = seconds_since(t0);
  return r;
}

EvalResult Trainer::evaluate_hf(const std::string& dir, const std::atomic<int>* stop) {
  init_from_hf(dir);
  sync_->start();
  return evaluate(stop);
}

std::optional<double> Trainer::forward_backward(int64_t step, StepClock& clock, const std::atomic<int>* stop) {
  const TrainConfig& t = cfg_.train;
  const int B = t.micro_batch, T = t.seq_len / sp();
  const float loss_scale = 1.0f / (float(B) * T * t.grad_accum);
  model_.zero_grads();
  double loss = 0;
  for (int micro = 0; micro < t.grad_accum; ++micro) {
    sync_->begin_micro_batch(micro + 1 == t.grad_accum);
    clock.lap(&StepPhases::other);
    const int32_t *in = nullptr, *tgt = nullptr;
    read_micro_batch(step, micro, in, tgt);
    clock.lap(&StepPhases::data);
    loss += model_.forward(in, tgt, B, T, doc_starts()) / t.grad_accum;
    clock.lap(&StepPhases::forward);
    model_.backward(loss_scale, [this](int i) { sync_->on_grad_ready(i); });
    clock.lap(&StepPhases::backward);
    loss = sync_->finish_micro_batch(loss);
    // At a fixed micro-batch count, the same on every rank: after
    // finish_micro_batch no reduction of this step is in flight.
    if ((micro + 1) % kStopCheckMicroBatches == 0 && micro + 1 < t.grad_accum &&
        boundary_.any_stop(stop && stop->load() != 0))
      return std::nullopt;
  }
  clock.lap(&StepPhases::other);
  return loss;
}

void Trainer::record_sync(TrainSummary& s) const {
  const SyncReport sync = sync_->report();
  if (!sync.group) return;
  const StepCommStats& c = *sync.last_step;
  s.comm_seconds.push_back(c.comm_seconds);
  s.isp_gather_seconds.push_back(c.part("weight_gather").seconds);
  s.isp_prefetch_wait_seconds.push_back(c.part("weight_gather").wait_seconds);
  s.exposed_seconds.push_back(c.exposed_seconds);
  s.bucket_seconds.resize(c.bucket_seconds.size());
  for (size_t b = 0; b < c.bucket_seconds.size(); ++b) s.bucket_seconds[b] += c.bucket_seconds[b];
  s.bucket_count = sync.bucket_count;
  s.bucket_cap_mb = sync.bucket_cap_mb;
}

StepReport Trainer::step_report(int64_t step, double loss, double lr, double norm, const StepClock& clock) const {
  const SyncReport sync = sync_->report();
  const StepCommStats& c = *sync.last_step;
  StepReport r;
  r.step = step + 1;
  r.total_steps = cfg_.train.steps;
  r.loss = loss;
  r.lr = lr;
  r.grad_norm = norm;
  r.step_seconds = clock.seconds();
  r.tokens = micro_batch_tokens() * cfg_.train.grad_accum * rank_.world;
  r.tokens_per_second = r.tokens / r.step_seconds;
  if (cfg_.metrics.peak_tflops > 0)
    r.mfu = r.tokens_per_second / rank_.world * flops_per_token() / (cfg_.metrics.peak_tflops * 1e12);
  const StepPhases& p = clock.phases();
  r.data_seconds = p.data;
  r.forward_seconds = p.forward;
  r.backward_seconds = p.backward;
  r.optimizer_seconds = p.optimizer;
  r.other_seconds = p.other;
  const StateBytes& mem = sync.memory;
  r.memory_param_bytes = mem.params;
  r.memory_grad_bytes = mem.grads;
  r.memory_optimizer_bytes = mem.optimizer;
  r.memory_activation_bytes = static_cast<int64_t>(model_.activation_bytes());
  r.memory_isp_pool_bytes = mem.other_bytes("isp_pool");
  if (buffer_->device() == Device::CUDA) {
    const ops::CudaMemory dm = ops::cuda_memory();
    r.memory_device_held_bytes = dm.held;
    r.memory_device_in_use_bytes = dm.in_use;
  }
  r.isp_prefetch_wait_seconds = c.part("weight_gather").wait_seconds;
  if (const comm::Communicator* group = sync.group) {
    r.sync_group = group->name();
    r.comm_seconds = c.comm_seconds;
    r.exposed_comm_seconds = c.exposed_seconds;
    r.overlap_ratio = c.overlap_ratio();
    r.bucket_seconds = c.bucket_seconds;
    r.bucket_count = sync.bucket_count;
    r.bucket_cap_bytes = static_cast<int64_t>(sync.bucket_cap_mb * 1024 * 1024);
    r.bucket_cap_step = cap_step_;
    r.bucket_cap_rejected = boundary_.rejected_caps();
  }
  if (dropped_phase_) r.*dropped_phase_ = 0;
  return r;
}

void Trainer::record_step(TrainSummary& s, const StepReport& r) const {
  s.step_seconds.push_back(r.step_seconds);
  s.losses.push_back(r.loss);
  const StepPhases p{r.data_seconds,         r.forward_seconds, r.backward_seconds, r.optimizer_seconds,
                     r.exposed_comm_seconds, r.other_seconds};
  s.step_phases.push_back(p);
  s.data_seconds += p.data;
  s.forward_seconds += p.forward;
  s.backward_seconds += p.backward;
  s.optimizer_seconds += p.optimizer;
  s.other_seconds += p.other;
  const double missing = r.step_seconds - p.sum();
  if (buffer_->device() != Device::CPU || std::abs(missing) <= phase_sum_tolerance(r.step_seconds)) return;
  if (s.misaccounted_steps++ == 0)
    spdlog::warn("step {}: its phases sum to {:.3f} ms of its {:.3f} ms ({} {:.3f} ms, more than the {:.3f} ms "
                 "tolerance): time counted {}; weft_phase_unaccounted_seconds_total counts every step's",
                 r.step, p.sum() * 1e3, r.step_seconds * 1e3, missing > 0 ? "missing" : "excess",
                 std::abs(missing) * 1e3, phase_sum_tolerance(r.step_seconds) * 1e3,
                 missing > 0 ? "in no phase" : "twice");
}

void Trainer::save(TrainSummary& s, int64_t steps_completed, double last_loss, CheckpointKind kind) {
  publish_pending(s);
  // A stop right after a periodic checkpoint has it already (published just
  // now, if it was written in the background); the same step is not written
  // twice. A run's last checkpoint is: it adds the HF model files.
  if (kind == CheckpointKind::Stop && saved_step_ == steps_completed) return;
  if (!cfg_.checkpoint.save) return;  // checkpoint.save: false writes none
  saved_step_ = steps_completed;
  // Empty: replicated state another rank writes, or files still being written.
  if (const auto saved = checkpoints_->save(steps_completed, last_loss, kind))
    report(s, saved->path, saved->step, saved->seconds);
}

void Trainer::publish_pending(TrainSummary& s) {
  if (const auto saved = checkpoints_->complete()) report(s, saved->path, saved->step, saved->seconds);
}

void Trainer::report(TrainSummary& s, const std::string& path, int64_t step, double seconds) {
  s.last_checkpoint = path;
  s.checkpoint_seconds += seconds;
  spdlog::info("checkpoint written: {}", path);
  if (observer_) observer_->on_checkpoint(step);
}

TrainSummary Trainer::run(const std::atomic<int>* stop, const std::function<void()>& started) {
  const TrainConfig& t = cfg_.train;
  TrainSummary s;
  begin_run(s, started);
  const auto t0 = Clock::now();
  int64_t step = s.start_step;
  for (; step < t.steps; ++step) {
    if (rank_.context) rank_.context->set_step(step + 1);
    const std::optional<StepReport> r = train_step(step, s, stop);
    if (!r) {
      s.stopped_early = true;
      break;
    }
    publish_step(*r, s, seconds_since(t0));
    const EvalOutcome eval = evaluate_after(step, r->loss, s, stop);
    if (eval == EvalOutcome::Stopped) {
      // The step is trained: the stop's checkpoint holds it.
      s.stopped_early = true;
      ++step;
      break;
    }
    // After the last step the run is complete: it ends as finished, with
    // its final checkpoint (a model directory), not as a stopped one.
    if (eval == EvalOutcome::StoppedAfterLast) continue;
    // A sharded checkpoint's files were written during this step: publish it.
    publish_pending(s);
    if (cfg_.checkpoint.every > 0 && (step + 1) % cfg_.checkpoint.every == 0 && step + 1 < t.steps)
      save(s, step + 1, r->loss, CheckpointKind::Periodic);
  }
  sync_->state().flush();
  end_run(s, step, seconds_since(t0));
  return s;
}

void Trainer::begin_run(TrainSummary& s, const std::function<void()>& started) {
  s.num_params = model_.num_params();
  s.entropy_floor = source_->entropy_floor();
  log_start(s);
  s.bucket_cap_mb = sync_->report().bucket_cap_mb;
  s.start_step = resume_or_init(s);
  if (started) started();
  if (s.start_step < cfg_.train.steps)
    spdlog::info("training steps {}..{}; a stop (SIGTERM, SIGINT) from here on is answered with a checkpoint",
                 s.start_step + 1, cfg_.train.steps);
  sync_->start();
  release_init_blocks();
}

void Trainer::release_init_blocks() const {
  // Loading and initialising leave the GPU allocator's cache full of blocks
  // of sizes the step never asks for (f32 staging of safetensors, shards):
  // give them back, or they sit beside the step's own blocks until exit.
  if (buffer_->device() != Device::CUDA) return;
  const ops::CudaMemory init = ops::cuda_memory();
  ops::cuda_release_cached();
  spdlog::info("GPU memory after init: {:.0f} MiB in use, {:.0f} MiB of cached blocks returned "
               "(init peak {:.0f} MiB held); the device has {:.0f} MiB in use",
               init.in_use / 1048576.0, (init.held - init.in_use) / 1048576.0, init.peak_held / 1048576.0,
               ops::cuda_device_used() / 1048576.0);
}

std::optional<StepReport> Trainer::train_step(int64_t step, TrainSummary& s, const std::atomic<int>* stop) {
  // Every instant from here to the device's end of the step is in one lap.
  StepClock clock;
  if (!agree_at_boundary(step, stop)) return std::nullopt;
  const double lr = lr_at(cfg_.optim, step, cfg_.train.steps);
  sync_->prepare_step(lr, cfg_.optim.grad_clip);
  const std::optional<double> loss = forward_backward(step, clock, stop);
  if (!loss) {
    spdlog::warn("step {} abandoned after a stop request; the checkpoint holds step {}", step + 1, step);
    return std::nullopt;
  }
  const double norm = sync_->clip_and_step(lr, cfg_.optim.grad_clip);
  clock.lap(&StepPhases::optimizer);
  // After the step, like the step report: ZeRO waits for the norm and its
  // gathers there, and ISP completes its accounting there.
  record_sync(s);
  // A step ends when the device has run it, not when its optimizer kernels
  // were launched: step times, tokens/s and MFU are the device's (and a
  // PyTorch loop that synchronises per step times the same thing).
  if (buffer_->device() == Device::CUDA) ops::cuda_finish_compute("the training step");
  clock.lap(&StepPhases::other);
  if (!std::isfinite(*loss))
    throw DivergedError("loss is " + std::to_string(*loss) + " at step " + std::to_string(step + 1) +
                        "; lower optim.lr, or check the data and the initial weights");
  const StepReport r = step_report(step, *loss, lr, norm, clock);
  record_step(s, r);
  return r;
}

void Trainer::publish_step(const StepReport& r, const TrainSummary& s, double elapsed) const {
  if (observer_) observer_->on_step(r);
  const int64_t log_every = cfg_.train.log_every;
  if (log_every > 0 && (r.step % log_every == 0 || r.step == r.total_steps))
    log_progress(r, elapsed, r.step - s.start_step);
}

Trainer::EvalOutcome Trainer::evaluate_after(int64_t step, double train_loss, TrainSummary& s,
                                             const std::atomic<int>* stop) {
  const int64_t done = step + 1;
  if (cfg_.eval.every <= 0 || (done % cfg_.eval.every != 0 && done != cfg_.train.steps)) return EvalOutcome::NotDue;
  const EvalResult e = evaluate(stop);
  if (e.stopped && done < cfg_.train.steps) {
    spdlog::warn("eval after step {} abandoned after a stop request ({:.2f} s in)", done, e.seconds);
    return EvalOutcome::Stopped;
  }
  if (e.stopped) {
    spdlog::warn("eval after the last step abandoned after a stop request ({:.2f} s in); the run is complete",
                 e.seconds);
    return EvalOutcome::StoppedAfterLast;
  }
  s.eval_steps.push_back(done);
  s.eval_losses.push_back(e.loss);
  spdlog::info("eval after step {}: held-out loss {:.4f} (train {:.4f}; {} batches, {} tokens, {:.2f} s)", done,
               e.loss, train_loss, e.batches, e.tokens, e.seconds);
  if (observer_) observer_->on_eval(done, e.loss);
  return EvalOutcome::Done;
}

void Trainer::end_run(TrainSummary& s, int64_t step, double wall_seconds) {
  finish(s, step, wall_seconds);
  // The last checkpoint of a finished run is a model directory (HF files);
  // a stopped run's is resumed, and its deadline is the grace period: both
  // are published (with the one still in flight) before run returns.
  const bool trained = step > s.start_step;
  if (trained || s.stopped_early)
    save(s, step, s.final_loss, s.stopped_early ? CheckpointKind::Stop : CheckpointKind::Final);
  else
    publish_pending(s);
  s.peak_rss_bytes = peak_rss_bytes();
  if (buffer_->device() == Device::CUDA) s.device_memory = ops::cuda_memory();
  log_end(s);
  // A run that trained no step (resumed with none left, or stopped before
  // its first) has no losses of its own: the summary.json of the run that
  // trained them stays.
  namespace fs = std::filesystem;
  std::error_code ec;
  if (rank_.rank == 0 && !trained && fs::exists(fs::path(cfg_.train.out_dir) / "summary.json", ec))
    spdlog::info("{}/summary.json kept: this run trained no step", cfg_.train.out_dir);
  else if (rank_.rank == 0)
    write_summary(s);
}

void Trainer::finish(TrainSummary& s, int64_t step, double wall_seconds) {
  s.memory = sync_->report().memory;
  s.steps_done = step;
  s.wall_seconds = wall_seconds;
  s.tokens = (step - s.start_step) * micro_batch_tokens() * cfg_.train.grad_accum * rank_.world;
  s.tokens_per_second = s.wall_seconds > 0 ? s.tokens / s.wall_seconds : 0;
  // No step in this run: the loss is the checkpoint's it resumed from (0
  // for a fresh run stopped before its first step).
  s.final_loss = s.losses.empty() ? start_loss_ : s.losses.back();
  const size_t tail = std::min<size_t>(10, s.losses.size());
  for (size_t i = s.losses.size() - tail; i < s.losses.size(); ++i) s.tail_loss += s.losses[i] / tail;
  if (s.losses.empty()) s.tail_loss = s.final_loss;
}

void Trainer::log_end(const TrainSummary& s) const {
  if (s.losses.empty()) {
    // Nothing of this run to compare with the floor: no loss 0.0000, no gap.
    const std::string from =
        s.start_step > 0 ? fmt::format(" (resumed from {}, loss {:.4f})", s.last_checkpoint, s.final_loss) : "";
    if (s.stopped_early)
      spdlog::info("stopped at step {} of {} before training a step{}", s.steps_done, cfg_.train.steps, from);
    else
      spdlog::info("nothing left to train: step {} of {} was reached by an earlier run{}", s.steps_done,
                   cfg_.train.steps, from);
    return;
  }
  const size_t tail = std::min<size_t>(10, s.losses.size());
  spdlog::info("{} after {} steps: loss {:.4f} (last {} mean {:.4f}{}), {:.0f} tok/s, {} wall, peak RSS {:.0f} MiB",
               s.stopped_early ? "stopped" : "done", s.steps_done, s.final_loss, tail, s.tail_loss,
               s.entropy_floor >= 0 ? fmt::format(", floor {:.4f}, gap {:.4f}", s.entropy_floor,
                                                  s.tail_loss - s.entropy_floor)
                                    : std::string(),
               s.tokens_per_second, hms(s.wall_seconds), s.peak_rss_bytes / 1048576.0);
  if (s.device_memory.peak_held > 0)
    spdlog::info("GPU memory of the steps (weft's allocator): peak in use {:.0f} MiB, peak held "
                 "{:.0f} MiB; the device has {:.0f} MiB in use",
                 s.device_memory.peak_in_use / 1048576.0, s.device_memory.peak_held / 1048576.0,
                 ops::cuda_device_used() / 1048576.0);
  if (!sync_->report().group) return;
  double comm = 0, exposed = 0;
  for (double c : s.comm_seconds) comm += c;
  for (double e : s.exposed_seconds) exposed += e;
  spdlog::info("gradient sync: {} buckets ({:.3g} MiB cap), comm {:.3f} s, exposed {:.3f} s, overlap ratio {:.3f}",
               s.bucket_count, s.bucket_cap_mb, comm, exposed, s.overlap_ratio());
}

void Trainer::write_summary(const TrainSummary& s) const {
  namespace fs = std::filesystem;
  fs::create_directories(cfg_.train.out_dir);
  nlohmann::json j = {{"start_step", s.start_step},
                      {"steps_done", s.steps_done},
                      {"steps", cfg_.train.steps},
                      {"final_loss", s.final_loss},
                      {"tail_loss", s.tail_loss},
                      {"entropy_floor", s.entropy_floor},
                      {"tokens_per_second", s.tokens_per_second},
                      {"wall_seconds", s.wall_seconds},
                      {"tokens", s.tokens},
                      {"num_params", s.num_params},
                      {"peak_rss_bytes", s.peak_rss_bytes},
                      {"stopped_early", s.stopped_early},
                      {"last_checkpoint", s.last_checkpoint},
                      {"world_size", rank_.world},
                      {"phase_seconds",
                       {{"data", s.data_seconds},
                        {"forward", s.forward_seconds},
                        {"backward", s.backward_seconds},
                        {"optimizer", s.optimizer_seconds},
                        {"other", s.other_seconds},
                        {"checkpoint", s.checkpoint_seconds}}},
                      {"misaccounted_steps", s.misaccounted_steps},
                      {"gradient_sync",
                       {{"bucket_count", s.bucket_count},
                        {"bucket_cap_mb", s.bucket_cap_mb},
                        {"overlap_ratio", s.overlap_ratio()},
                        {"comm_seconds", s.comm_seconds},
                        {"exposed_seconds", s.exposed_seconds},
                        {"bucket_seconds", s.bucket_seconds}}},
                      {"isp",
                       {{"weight_gather_seconds", s.isp_gather_seconds},
                        {"prefetch_wait_seconds", s.isp_prefetch_wait_seconds}}},
                      {"memory_bytes",
                       {{"param", s.memory.params},
                        {"grad", s.memory.grads},
                        {"optimizer", s.memory.optimizer},
                        {"isp_pool", s.memory.other_bytes("isp_pool")},
                        {"device_peak_held", s.device_memory.peak_held},
                        {"device_peak_in_use", s.device_memory.peak_in_use}}},
                      {"losses", s.losses},
                      {"eval", {{"steps", s.eval_steps}, {"losses", s.eval_losses}}},
                      {"step_seconds", s.step_seconds}};
  // Each group's collectives over the run, and how many of them were staged
  // through host memory (comm.backend gloo with device cuda): what a GPU
  // check reads to know the staged path ran.
  nlohmann::json groups = nlohmann::json::object();
  for (const comm::CommunicatorPtr& g : {rank_.dp, rank_.sp, rank_.wp, rank_.wdp}) {
    if (!g || g->size() < 2 || groups.contains(g->name())) continue;
    const comm::CommStats st = g->stats();
    uint64_t count = 0, bytes = 0;
    for (const auto& [op, o] : st.by_op) count += o.count, bytes += o.bytes;
    groups[g->name()] = {{"collectives", count},
                         {"bytes", bytes},
                         {"staged_collectives", st.staged.count},
                         {"staged_bytes", st.staged.bytes}};
  }
  j["comm_groups"] = groups;
  // Each step's measured phases (StepReport), for the per-step check of
  // their sum against step_seconds (docs/metrics.md).
  nlohmann::json phases = nlohmann::json::object();
  const std::pair<const char*, double StepPhases::*> columns[] = {
      {"data", &StepPhases::data},           {"forward", &StepPhases::forward},
      {"backward", &StepPhases::backward},   {"optimizer", &StepPhases::optimizer},
      {"exposed_comm", &StepPhases::exposed_comm}, {"other", &StepPhases::other}};
  for (const auto& [name, field] : columns) {
    nlohmann::json& column = phases[name] = nlohmann::json::array();
    for (const StepPhases& p : s.step_phases) column.push_back(p.*field);
  }
  j["step_phase_seconds"] = phases;
  const fs::path path = fs::path(cfg_.train.out_dir) / "summary.json";
  std::ofstream out(path.string() + ".tmp");
  out << j.dump(2) << "\n";
  out.close();
  fs::rename(path.string() + ".tmp", path);
}

}  // namespace weft
