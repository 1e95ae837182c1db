#include "parallel/sharded_optimizer.h"

#include <utility>

namespace weft {

ShardedOptimizer::ShardedOptimizer(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr dp, int stage,
                                   const OptimConfig& optim, std::function<void()> flush)
    : buf_(std::move(buffer)),
      dp_(std::move(dp)),
      stage_(stage),
      optim_cfg_(optim),
      flush_(std::move(flush)),
      all_ranges_(default_param_ranges(buf_->params(), optim)),
      opt_(optim, {}, buf_->device()) {
  WEFT_CHECK(stage_ == 1 || stage_ == 2, "ZeRO stage must be 1 or 2");
}

void ShardedOptimizer::plan(const std::vector<Bucket>& buckets) {
  const int n = dp_->size(), me = dp_->rank();
  const auto& params = buf_->params();
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
  }
  first_range_.push_back(owned.size());
  opt_ = AdamW(optim_cfg_, std::move(owned), buf_->device(),
               /*master_weights=*/buf_->param_dtype() != DType::F32);
  if (stage_ == 2)
    shard_grads_ = Buffer(static_cast<size_t>(opt_.state_numel()) * sizeof(float), buf_->device());
}

void ShardedOptimizer::reshard(const std::function<void()>& replan) {
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
  replan();
  opt_.set_step_count(steps);
  scatter_moments(opt_, false);
  if (master) opt_.load_master(all_master);
}

Tensor ShardedOptimizer::owned_grad(size_t i) const {
  const ParamRange& r = opt_.ranges()[i];
  if (stage_ == 2) {
    const int64_t s = opt_.state_offset(i);
    return shard_grads_.as(DType::F32, {opt_.state_numel()}).slice0(s, s + r.numel);
  }
  return buf_->flat_grads().slice0(r.offset, r.offset + r.numel);
}

void ShardedOptimizer::keep_reduced(const Bucket& b, bool first_micro) {
  for (size_t i = first_range_[b.index]; i < first_range_[b.index + 1]; ++i) {
    const ParamRange& r = opt_.ranges()[i];
    Tensor reduced = buf_->flat_grads().slice0(r.offset, r.offset + r.numel);
    first_micro ? ops::copy(owned_grad(i), reduced) : ops::add_acc(owned_grad(i), reduced);
  }
  ops::fill(buf_->flat_grads().slice0(b.begin, b.end), 0.0f);
}

void ShardedOptimizer::add_sumsq(int bucket, const NormScope& scope, double& acc) const {
  for (size_t i = first_range_[bucket]; i < first_range_[bucket + 1]; ++i)
    acc += scope.weight(param_of_range_[i]) * ops::sum_squares(owned_grad(i));
}

void ShardedOptimizer::step(int bucket, double lr) {
  Tensor params = buf_->flat_params();
  for (size_t i = first_range_[bucket]; i < first_range_[bucket + 1]; ++i) {
    const ParamRange& r = opt_.ranges()[i];
    opt_.step_range(i, params.slice0(r.offset, r.offset + r.numel), owned_grad(i), lr);
  }
}

void ShardedOptimizer::scale(float c) {
  for (size_t i = 0; i < opt_.ranges().size(); ++i) ops::scale(owned_grad(i), c);
}

std::string ShardedOptimizer::optimizer_layout() const {
  return weft::optimizer_layout(dp_->rank(), dp_->size(), opt_);
}

void ShardedOptimizer::load_full_weights(const ParamAndGradBuffer& full) {
  load_replicated_weights(*buf_, opt_, full);  // master: the owned ranges only
}

void ShardedOptimizer::gather_full_weights(ParamAndGradBuffer& full) {
  flush_();
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

AdamW ShardedOptimizer::export_shard() {
  flush_();
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

bool ShardedOptimizer::load_weights(const WeightSource& src) {
  // The working weights are whole on every rank; the master copy (f32, the
  // exact values) only for the owned ranges. No f32 copy of the full model.
  for (size_t i = 0; i < buf_->params().size(); ++i)
    src.read_into(buf_->params()[i].offset, buf_->param(static_cast<int>(i)));
  opt_.load_master(src);
  return true;
}

StateBytes ShardedOptimizer::state_bytes() const {
  // Stage 2 keeps only the owned shard between micro-batches; the full-size
  // buffer is backward's scratch, reused bucket by bucket.
  const int64_t grads = stage_ == 2 ? static_cast<int64_t>(shard_grads_.bytes())
                                    : static_cast<int64_t>(buf_->grad_bytes());
  return {static_cast<int64_t>(buf_->param_bytes()), grads, opt_.state_bytes(), {}};
}

}  // namespace weft
