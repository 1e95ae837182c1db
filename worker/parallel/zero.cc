#include "parallel/zero.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "parallel/host_scalars.h"

namespace weft {

namespace {

// Backward visits the head first, then blocks n-1 .. 0, then the embedding.
int backward_pos(int layer, int n_layers) {
  if (layer == kHeadLayer) return 0;
  if (layer == kEmbeddingLayer) return n_layers + 1;
  return n_layers - layer;
}

}  // namespace

ZeroOptions zero_options(const ParallelConfig& p) {
  ZeroOptions z;
  z.stage = p.zero.stage;
  z.overlap_reduce = p.overlap;
  z.overlap = p.zero.overlap;
  z.overlap_param_gather = p.zero.overlap_param_gather;
  z.buckets = bucket_options(p);
  // The unsynced negative control is data parallelism's (a reduce-scatter
  // that is a barrier would leave the owned shards unreduced, not unsynced).
  z.buckets.unsynced_for_tests = false;
  return z;
}

ZeroGradSync::ZeroGradSync(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr dp,
                           ZeroOptions opt, const OptimConfig& optim)
    : GradSync(optimizer_),
      o_(opt),
      reducer_(buffer, dp, BucketCollective::ReduceScatterAvg, opt.buckets),
      optimizer_(std::move(buffer), std::move(dp), opt.stage, optim,
                 [this] { reducer_.wait_gathers(); }) {
  plan_shards();
  reducer_.buffer().set_weight_hook(this);
}

ZeroGradSync::~ZeroGradSync() {
  // Nothing may still write into the buffers once we are gone.
  try {
    for (int b = 0; b < reducer_.engine().size(); ++b) reducer_.wait_gather(b);
  } catch (const std::exception&) {
    // The group failed; the error was reported where it happened.
  }
  reducer_.buffer().set_weight_hook(nullptr);
}

SyncReport ZeroGradSync::make_report(bool describe) const {
  SyncReport r = reducer_.report();
  r.memory = optimizer_.state_bytes();
  if (!describe) return r;
  const comm::Communicator& dp = reducer_.group();
  const BucketEngine& engine = reducer_.engine();
  r.description = fmt::format(
      "ZeRO stage {} over {} ranks (group {}), bucket {}, {}, reduce-scatters {} backward, overlap "
      "{}, param gather {}, "
      "wire {}, optimizer state {:.2f} MiB on this rank",
      o_.stage, dp.size(), dp.name(), engine.sizing().describe(),
      describe_buckets(engine.buckets()), o_.overlap_reduce ? "during" : "after",
      contract::mode_name(o_.overlap),
      o_.overlap_param_gather ? "overlapped with forward" : "in the step",
      o_.buckets.bf16_wire ? "bf16" : "fp32", r.memory.optimizer / 1048576.0);
  return r;
}

void ZeroGradSync::plan_shards() {
  const auto& params = reducer_.buffer().params();
  const std::vector<Bucket>& buckets = reducer_.engine().buckets();
  int n_layers = 0;
  for (const ParamInfo& p : params) n_layers = std::max(n_layers, p.layer + 1);
  last_pos_.assign(buckets.size(), 0);
  forward_buckets_.assign(n_layers + 2, {});
  for (const Bucket& b : buckets) {
    for (int p = b.first_param; p <= b.last_param; ++p) {
      const int pos = backward_pos(params[p].layer, n_layers);
      last_pos_[b.index] = std::max(last_pos_[b.index], pos);
      auto& fb = forward_buckets_[pos];
      if (fb.empty() || fb.back() != b.index) fb.push_back(b.index);
    }
  }
  // A tied LM head reads the embedding: the head waits for its bucket too.
  for (int b : forward_buckets_[backward_pos(kEmbeddingLayer, n_layers)])
    forward_buckets_[0].push_back(b);
  optimizer_.plan(buckets);
  reducer_.reset_gathers();
  stepped_.assign(buckets.size(), 0);
}

void ZeroGradSync::rebucket(double cap_mb, int64_t step) {
  reducer_.wait_gathers();
  optimizer_.reshard([&] {
    reducer_.engine().plan(cap_mb);
    plan_shards();
  });
  spdlog::info("step {}: bucket cap now {:.3g} MiB, {}", step + 1, cap_mb,
               describe_buckets(reducer_.engine().buckets()));
}

void ZeroGradSync::prepare_step(double lr, double max_norm) {
  lr_ = lr;
  max_norm_ = max_norm;
  prepared_ = true;
  // Stepping before the last reduction needs the clip factor, known only then.
  step_early_ = o_.overlap != ZeroOverlap::None && !(max_norm > 0);
  reset_step_stats();
}

void ZeroGradSync::reset_step_stats() {
  reducer_.stats() = StepCommStats{};
  reducer_.waits().clear();  // waits outside a step (checkpoint gathers) are not a step's
  reducer_.stats().bucket_seconds.assign(reducer_.engine().size(), 0);
}

void ZeroGradSync::begin_micro_batch(bool last) {
  if (!prepared_ && micro_ == 0) reset_step_stats();
  last_ = last;
  next_complete_ = 0;
  reducer_.engine().begin();
  if (last) {
    optimizer_.optimizer().begin_step();
    shard_sumsq_ = 0;
    std::fill(stepped_.begin(), stepped_.end(), 0);
  }
}

void ZeroGradSync::on_grad_ready(int param) {
  if (!communicates()) return;  // stage 1: accumulate locally until the last micro-batch
  reducer_.engine().mark_ready(param);
  if (o_.overlap_reduce) reducer_.engine().launch_ready_in_order();
}

void ZeroGradSync::complete(int index) {
  const Bucket& b = reducer_.engine().buckets()[index];
  reducer_.waits().time([&] { reducer_.engine().wait(index); });  // the owned shard is f32 again
  reducer_.engine().account(index, reducer_.stats());
  reducer_.stats().comm_seconds = reducer_.stats().spans.busy_seconds();
  // Stage 2 keeps the owned shard; the bucket's full gradients are free for
  // the next micro-batch's backward.
  if (o_.stage == 2) optimizer_.keep_reduced(b, micro_ == 0);
  if (!last_) return;
  optimizer_.add_sumsq(index, norm_scope(), shard_sumsq_);
  if (step_early_) step_bucket(index, lr_);
}

void ZeroGradSync::complete_ready(int done_pos, bool block) {
  while (next_complete_ < reducer_.engine().launched() && last_pos_[next_complete_] < done_pos &&
         (block || reducer_.engine().completed(next_complete_)))
    complete(next_complete_++);
}

void ZeroGradSync::before_use(int layer, WeightUse use) {
  const int n_layers = static_cast<int>(forward_buckets_.size()) - 2;
  const int pos = backward_pos(layer, n_layers);
  if (use == WeightUse::Forward) {
    for (int b : forward_buckets_[pos]) reducer_.wait_gather(b);
    return;
  }
  // Every layer before `pos` in backward order is done with its weights and
  // gradients: their buckets may be stepped and gathered now.
  if (communicates() && o_.overlap == ZeroOverlap::Interleaved && step_early_ && last_)
    complete_ready(pos, /*block=*/false);
}

double ZeroGradSync::finish_micro_batch(double loss) {
  if (!communicates()) {
    ++micro_;
    return loss;
  }
  reducer_.engine().check_all_ready();
  reducer_.engine().launch_ready_in_order();
  comm::WorkPtr loss_work;
  if (last_) loss_work = reducer_.average_loss(loss);
  // Gathers are issued only now, after every reduce-scatter, in bucket order:
  // each rank polls completions at its own pace, and collectives must be
  // issued in the same order everywhere.
  for (int b = 0; b < reducer_.engine().size(); ++b) {
    if (b == next_complete_) complete(next_complete_++);
    if (last_ && stepped_[b] && !o_.overlap_param_gather) reducer_.launch_gather(b);
  }
  ++micro_;
  if (!last_) return loss;
  loss_work->wait();
  return reducer_.averaged_loss();
}

void ZeroGradSync::step_bucket(int index, double lr) {
  optimizer_.step(index, lr);
  stepped_[index] = 1;
}

double ZeroGradSync::clip_and_step(double lr, double max_norm) {
  WEFT_CHECK(next_complete_ == reducer_.engine().size(),
             "clip_and_step before the last micro-batch finished");
  // The owned shards partition the parameters: the global norm is the root of
  // the summed shard norms, the same as the unsharded gradient's.
  norm_wire_ = static_cast<float>(shard_sumsq_);
  comm::WorkPtr norm_work = all_reduce_host(reducer_.group(), reducer_.buffer().device(),
                                            &norm_wire_, 1, comm::ReduceOp::Sum, "grad norm");
  reducer_.waits().time([&] { norm_work->wait(); });
  const double norm = std::sqrt(norm_scope().reduce(static_cast<double>(norm_wire_)));
  const double c = clip_coefficient(norm, max_norm);
  if (c != 1.0) {
    WEFT_CHECK(!step_early_ || std::find(stepped_.begin(), stepped_.end(), 1) == stepped_.end(),
               "clipping after shards were stepped");
    optimizer_.scale(static_cast<float>(c));
  }
  for (const Bucket& b : reducer_.engine().buckets())
    if (!stepped_[b.index]) step_bucket(b.index, lr);
  if (o_.overlap_param_gather) {
    // In forward order (the embedding's bucket is the last one), so the first
    // layers' weights arrive first; the next forward waits per layer.
    for (int b = reducer_.engine().size() - 1; b >= 0; --b)
      if (!reducer_.gathering(b)) reducer_.launch_gather(b);
  } else {
    for (const Bucket& b : reducer_.engine().buckets())
      if (!reducer_.gathering(b.index)) reducer_.launch_gather(b.index);
    for (const Bucket& b : reducer_.engine().buckets()) reducer_.wait_gather(b.index);
  }
  // Every wait of this step is behind us: on a GPU, one sync reads them all.
  reducer_.stats().exposed_seconds += reducer_.waits().take_seconds();
  prepared_ = step_early_ = false;
  micro_ = 0;
  return norm;
}

}  // namespace weft
