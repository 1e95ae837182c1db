#include "parallel/zero.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <spdlog/spdlog.h>

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
  z.bucket_cap_mb = p.bucket_cap_mb;
  z.first_bucket_mb = p.first_bucket_mb;
  z.bf16_wire = p.bf16_wire;
  return z;
}

ZeroGradSync::ZeroGradSync(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr dp,
                           ZeroOptions opt, const OptimConfig& optim)
    : buf_(std::move(buffer)),
      dp_(std::move(dp)),
      o_(opt),
      optim_cfg_(optim),
      all_ranges_(default_param_ranges(buf_->params(), optim)),
      engine_(buf_, dp_, BucketCollective::ReduceScatterAvg, {opt.bucket_cap_mb, opt.first_bucket_mb, opt.bf16_wire}),
      opt_(optim, {}, buf_->device()),
      waits_(buf_->device()) {
  WEFT_CHECK(o_.stage == 1 || o_.stage == 2, "ZeRO stage must be 1 or 2");
  plan_shards();
  buf_->set_weight_hook(this);
}

ZeroGradSync::~ZeroGradSync() {
  // Nothing may still write into the buffers once we are gone.
  try {
    for (auto& w : ag_)
      if (w) w->wait();
  } catch (const std::exception&) {
    // The group failed; the error was reported where it happened.
  }
  buf_->set_weight_hook(nullptr);
}

std::string ZeroGradSync::describe() const {
  return fmt::format(
      "ZeRO stage {} over {} ranks (group {}), bucket {}, {}, reduce-scatters {} backward, overlap {}, param gather {}, "
      "wire {}, optimizer state {:.2f} MiB on this rank",
      o_.stage, dp_->size(), dp_->name(), engine_.sizing().describe(), describe_buckets(engine_.buckets()),
      o_.overlap_reduce ? "during" : "after", contract::mode_name(o_.overlap),
      o_.overlap_param_gather ? "overlapped with forward" : "in the step",
      o_.bf16_wire ? "bf16" : "fp32", opt_.state_bytes() / 1048576.0);
}

std::string ZeroGradSync::optimizer_layout() const { return weft::optimizer_layout(dp_->rank(), dp_->size(), opt_); }

StateBytes ZeroGradSync::state_bytes() const {
  // Stage 2 keeps only the owned shard between micro-batches; the full-size
  // buffer is backward's scratch, reused bucket by bucket.
  const int64_t grads = o_.stage == 2 ? static_cast<int64_t>(shard_grads_.bytes())
                                      : static_cast<int64_t>(buf_->grad_bytes());
  return {static_cast<int64_t>(buf_->param_bytes()), grads, opt_.state_bytes()};
}

void ZeroGradSync::plan(double cap_mb) {
  engine_.plan(cap_mb);
  plan_shards();
}

void ZeroGradSync::plan_shards() {
  const int n = dp_->size(), me = dp_->rank();
  const auto& params = buf_->params();
  const std::vector<Bucket>& buckets = engine_.buckets();
  int n_layers = 0;
  for (const ParamInfo& p : params) n_layers = std::max(n_layers, p.layer + 1);
  last_pos_.assign(buckets.size(), 0);
  forward_buckets_.assign(n_layers + 2, {});
  std::vector<ParamRange> owned;
  first_range_.clear();
  param_of_range_.clear();
  auto param_at = [&params](int64_t offset) {
    int i = 0;
    while (i + 1 < static_cast<int>(params.size()) && params[i + 1].offset <= offset) ++i;
    return i;
  };
  for (const Bucket& b : buckets) {
    first_range_.push_back(owned.size());
    for (const ParamRange& r : ranges_within(all_ranges_, b.shard_begin(me, n), b.shard_end(me, n))) {
      owned.push_back(r);
      param_of_range_.push_back(param_at(r.offset));
    }
    for (int p = b.first_param; p <= b.last_param; ++p) {
      const int pos = backward_pos(params[p].layer, n_layers);
      last_pos_[b.index] = std::max(last_pos_[b.index], pos);
      auto& fb = forward_buckets_[pos];
      if (fb.empty() || fb.back() != b.index) fb.push_back(b.index);
    }
  }
  first_range_.push_back(owned.size());
  // A tied LM head reads the embedding: the head waits for its bucket too.
  for (int b : forward_buckets_[backward_pos(kEmbeddingLayer, n_layers)])
    forward_buckets_[0].push_back(b);
  opt_ = AdamW(optim_cfg_, std::move(owned), buf_->device(),
               /*master_weights=*/buf_->param_dtype() != DType::F32);
  if (o_.stage == 2)
    shard_grads_ = Buffer(static_cast<size_t>(opt_.state_numel()) * sizeof(float), buf_->device());
  ag_.assign(buckets.size(), nullptr);
  ag_issued_.assign(buckets.size(), {});
  stepped_.assign(buckets.size(), 0);
}

void ZeroGradSync::rebucket(double cap_mb, int64_t step) {
  flush();
  // The shards move with the buckets: every rank puts its state at its place
  // in full-size buffers of zeros, a Sum all-reduce assembles the whole state
  // (exactly: x + 0 = x), and each rank keeps what it owns under the new
  // layout. Full-size memory only for this moment.
  const bool master = opt_.has_master();
  const int parts = master ? 3 : 2;
  const int64_t numel = buf_->numel();
  Buffer full(static_cast<size_t>(numel) * parts * sizeof(float), buf_->device());
  full.zero();
  Tensor all = full.as(DType::F32, {numel * parts});
  // The moments part by part; the master copy, laid out like the parameters,
  // through store_master / load_master (how the new optimizer's is loaded).
  Tensor all_master = master ? all.slice0(2 * numel, 3 * numel) : Tensor();
  auto scatter_moments = [&](const AdamW& a, bool to_full) {
    const Tensor state[2] = {a.exp_avg(), a.exp_avg_sq()};
    for (int k = 0; k < 2; ++k)
      for (size_t i = 0; i < a.ranges().size(); ++i) {
        const ParamRange& r = a.ranges()[i];
        Tensor f = all.slice0(k * numel + r.offset, k * numel + r.offset + r.numel);
        Tensor s = state[k].slice0(a.state_offset(i), a.state_offset(i) + r.numel);
        to_full ? ops::copy(f, s) : ops::copy(s, f);
      }
  };
  scatter_moments(opt_, true);
  if (master) opt_.store_master(all_master);
  dp_->all_reduce(all, comm::ReduceOp::Sum, "optimizer state re-shard")->wait();
  const int64_t steps = opt_.step_count();
  plan(cap_mb);
  opt_.set_step_count(steps);
  scatter_moments(opt_, false);
  if (master) opt_.load_master(all_master);
  spdlog::info("step {}: bucket cap now {:.3g} MiB, {}", step + 1, cap_mb, describe_buckets(engine_.buckets()));
}

void ZeroGradSync::start() { dp_->broadcast(buf_->flat_params(), 0, "initial parameters")->wait(); }

void ZeroGradSync::load_full_weights(const ParamAndGradBuffer& full) {
  load_replicated_weights(*buf_, opt_, full);  // master: the owned ranges only
}

void ZeroGradSync::gather_full_weights(ParamAndGradBuffer& full) {
  flush();
  if (!opt_.has_master()) return buf_->store_params(full.flat_params());
  // Each element's master lives on the one rank that owns it: every rank puts
  // its ranges into zeros and a Sum all-reduce assembles them exactly.
  const int64_t numel = buf_->numel();
  Buffer all(static_cast<size_t>(numel) * sizeof(float), buf_->device());
  all.zero();
  Tensor t = all.as(DType::F32, {numel});
  opt_.store_master(t);
  dp_->all_reduce(t, comm::ReduceOp::Sum, "master weights")->wait();
  assign(full.flat_params(), t);
}

AdamW ZeroGradSync::export_shard() {
  flush();
  // The owned ranges are already in the model's flat layout and partition it.
  AdamW out(optim_cfg_, opt_.ranges(), Device::CPU, /*master_weights=*/true);
  out.load_state(opt_);
  if (opt_.has_master()) {
    assign(out.master(), opt_.master());
  } else {
    const Tensor params = buf_->flat_params();
    for (size_t i = 0; i < opt_.ranges().size(); ++i) {
      const ParamRange& r = opt_.ranges()[i];
      const int64_t s = out.state_offset(i);
      assign(out.master().slice0(s, s + r.numel), params.slice0(r.offset, r.offset + r.numel));
    }
  }
  return out;
}

bool ZeroGradSync::load_weights(const WeightSource& src) {
  // The working weights are whole on every rank; the master copy (f32, the
  // exact values) only for the owned ranges. No f32 copy of the full model.
  for (size_t i = 0; i < buf_->params().size(); ++i)
    src.read_into(buf_->params()[i].offset, buf_->param(static_cast<int>(i)));
  opt_.load_master(src);
  return true;
}

Tensor ZeroGradSync::owned_grad(size_t i) const {
  const ParamRange& r = opt_.ranges()[i];
  if (o_.stage == 2) {
    const int64_t s = opt_.state_offset(i);
    return shard_grads_.as(DType::F32, {opt_.state_numel()}).slice0(s, s + r.numel);
  }
  return buf_->flat_grads().slice0(r.offset, r.offset + r.numel);
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
  stats_ = StepCommStats{};
  waits_.clear();  // waits outside a step (checkpoint gathers) are not a step's
  stats_.bucket_seconds.assign(engine_.size(), 0);
}

void ZeroGradSync::begin_micro_batch(bool last) {
  if (!prepared_ && micro_ == 0) reset_step_stats();
  last_ = last;
  next_complete_ = 0;
  engine_.begin();
  if (last) {
    opt_.begin_step();
    shard_sumsq_ = 0;
    std::fill(stepped_.begin(), stepped_.end(), 0);
  }
}

void ZeroGradSync::on_grad_ready(int param) {
  if (!communicates()) return;  // stage 1: accumulate locally until the last micro-batch
  engine_.mark_ready(param);
  if (o_.overlap_reduce) engine_.launch_ready_in_order();
}

void ZeroGradSync::complete(int index) {
  const Bucket& b = engine_.buckets()[index];
  waits_.time([&] { engine_.wait(index); });  // the owned shard is f32 again
  engine_.account(index, stats_);
  stats_.comm_seconds = stats_.spans.busy_seconds();
  if (o_.stage == 2) {
    // Keep the owned shard; the bucket's full gradients are free for the next
    // micro-batch's backward.
    for (size_t i = first_range_[index]; i < first_range_[index + 1]; ++i) {
      const ParamRange& r = opt_.ranges()[i];
      Tensor reduced = buf_->flat_grads().slice0(r.offset, r.offset + r.numel);
      micro_ == 0 ? ops::copy(owned_grad(i), reduced) : ops::add_acc(owned_grad(i), reduced);
    }
    ops::fill(buf_->flat_grads().slice0(b.begin, b.end), 0.0f);
  }
  if (!last_) return;
  for (size_t i = first_range_[index]; i < first_range_[index + 1]; ++i)
    shard_sumsq_ += norm_scope_.weight(param_of_range_[i]) * ops::sum_squares(owned_grad(i));
  if (step_early_) step_bucket(index, lr_);
}

void ZeroGradSync::complete_ready(int done_pos, bool block) {
  while (next_complete_ < engine_.launched() && last_pos_[next_complete_] < done_pos &&
         (block || engine_.completed(next_complete_)))
    complete(next_complete_++);
}

void ZeroGradSync::before_use(int layer, WeightUse use) {
  const int n_layers = static_cast<int>(forward_buckets_.size()) - 2;
  const int pos = backward_pos(layer, n_layers);
  if (use == WeightUse::Forward) {
    for (int b : forward_buckets_[pos]) wait_gather(b);
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
  engine_.check_all_ready();
  engine_.launch_ready_in_order();
  comm::WorkPtr loss_work;
  if (last_) {
    loss_wire_ = static_cast<float>(loss);
    loss_work = all_reduce_host(*dp_, buf_->device(), &loss_wire_, 1, comm::ReduceOp::Avg, "loss");
  }
  // Gathers are issued only now, after every reduce-scatter, in bucket order:
  // each rank polls completions at its own pace, and collectives must be
  // issued in the same order everywhere.
  for (int b = 0; b < engine_.size(); ++b) {
    if (b == next_complete_) complete(next_complete_++);
    if (last_ && stepped_[b] && !o_.overlap_param_gather) launch_gather(b);
  }
  ++micro_;
  if (!last_) return loss;
  loss_work->wait();
  return loss_wire_;
}

void ZeroGradSync::step_bucket(int index, double lr) {
  Tensor params = buf_->flat_params();
  for (size_t i = first_range_[index]; i < first_range_[index + 1]; ++i) {
    const ParamRange& r = opt_.ranges()[i];
    opt_.step_range(i, params.slice0(r.offset, r.offset + r.numel), owned_grad(i), lr);
  }
  stepped_[index] = 1;
}

void ZeroGradSync::launch_gather(int index) {
  const Bucket& b = engine_.buckets()[index];
  const int n = dp_->size(), me = dp_->rank();
  Tensor p = buf_->flat_params();
  ag_issued_[index] = CommSpans::Clock::now();
  ag_[index] = dp_->all_gather(p.slice0(b.shard_begin(me, n), b.shard_end(me, n)),
                               p.slice0(b.begin, b.end), engine_.shard_counts(index),
                               "gather bucket " + std::to_string(index));
}

void ZeroGradSync::wait_gather(int index) {
  if (!ag_[index]) return;
  waits_.time([&] { ag_[index]->wait(); });
  stats_.spans.add(ag_issued_[index], *ag_[index]);
  stats_.comm_seconds = stats_.spans.busy_seconds();
  ag_[index] = nullptr;
}

double ZeroGradSync::clip_and_step(double lr, double max_norm) {
  WEFT_CHECK(next_complete_ == engine_.size(),
             "clip_and_step before the last micro-batch finished");
  // The owned shards partition the parameters: the global norm is the root of
  // the summed shard norms, the same as the unsharded gradient's.
  norm_wire_ = static_cast<float>(shard_sumsq_);
  comm::WorkPtr norm_work = all_reduce_host(*dp_, buf_->device(), &norm_wire_, 1, comm::ReduceOp::Sum, "grad norm");
  waits_.time([&] { norm_work->wait(); });
  const double norm = std::sqrt(norm_scope_.reduce(static_cast<double>(norm_wire_)));
  const double c = clip_coefficient(norm, max_norm);
  if (c != 1.0) {
    WEFT_CHECK(!step_early_ || std::find(stepped_.begin(), stepped_.end(), 1) == stepped_.end(),
               "clipping after shards were stepped");
    for (size_t i = 0; i < opt_.ranges().size(); ++i) ops::scale(owned_grad(i), static_cast<float>(c));
  }
  for (const Bucket& b : engine_.buckets())
    if (!stepped_[b.index]) step_bucket(b.index, lr);
  if (o_.overlap_param_gather) {
    // In forward order (the embedding's bucket is the last one), so the first
    // layers' weights arrive first; the next forward waits per layer.
    for (int b = engine_.size() - 1; b >= 0; --b)
      if (!ag_[b]) launch_gather(b);
  } else {
    for (const Bucket& b : engine_.buckets())
      if (!ag_[b.index]) launch_gather(b.index);
    for (const Bucket& b : engine_.buckets()) wait_gather(b.index);
  }
  // Every wait of this step is behind us: on a GPU, one sync reads them all.
  stats_.exposed_seconds += waits_.take_seconds();
  prepared_ = step_early_ = false;
  micro_ = 0;
  return norm;
}

void ZeroGradSync::flush() {
  for (const Bucket& b : engine_.buckets()) wait_gather(b.index);
}

}  // namespace weft
