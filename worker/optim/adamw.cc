#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "model/param_and_grad_buffer.h"

namespace weft {

std::vector<ParamRange> default_param_ranges(const std::vector<ParamInfo>& table,
                                             const OptimConfig& cfg) {
  std::vector<ParamRange> ranges;
  ranges.reserve(table.size());
  for (const ParamInfo& p : table) {
    bool decay = p.kind == ParamKind::Linear || cfg.decay_norms_and_embeddings;
    ranges.push_back({p.offset, p.numel, decay});
  }
  return ranges;
}

std::vector<ParamRange> ranges_within(const std::vector<ParamRange>& ranges, int64_t begin,
                                      int64_t end) {
  std::vector<ParamRange> out;
  for (const ParamRange& r : ranges) {
    const int64_t b = std::max(begin, r.offset), e = std::min(end, r.offset + r.numel);
    if (b < e) out.push_back({b, e - b, r.decay});
  }
  return out;
}

AdamW::AdamW(const OptimConfig& cfg, std::vector<ParamRange> ranges, Device device,
             bool master_weights)
    : cfg_(cfg), ranges_(std::move(ranges)), master_weights_(master_weights) {
  state_offset_.reserve(ranges_.size());
  for (const ParamRange& r : ranges_) {
    WEFT_CHECK(r.offset >= 0 && r.numel >= 0, "optimizer range with negative offset or size");
    state_offset_.push_back(state_numel_);
    state_numel_ += r.numel;
  }
  const size_t bytes = static_cast<size_t>(state_numel_) * sizeof(float);
  m_ = Buffer(bytes, device);
  v_ = Buffer(bytes, device);
  if (master_weights_) master_ = Buffer(bytes, device);
}

int64_t AdamW::state_bytes() const {
  return static_cast<int64_t>(m_.bytes() + v_.bytes() + master_.bytes());
}

void AdamW::step(Tensor flat_params, const Tensor& flat_grads, double lr, float grad_scale) {
  begin_step();
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const int64_t b = ranges_[i].offset, e = b + ranges_[i].numel;
    WEFT_CHECK(e <= flat_params.numel() && e <= flat_grads.numel(),
               "optimizer range [" + std::to_string(b) + ", " + std::to_string(e) +
                   ") outside the parameter buffer");
    step_range(i, flat_params.slice0(b, e), flat_grads.slice0(b, e), lr, grad_scale);
  }
}

void AdamW::step_range(size_t i, Tensor param, const Tensor& grad, double lr, float grad_scale) {
  WEFT_CHECK(step_ >= 1, "step_range before begin_step");
  WEFT_CHECK(!master_weights_ || master_loaded_,
             "AdamW: a step with a master copy that was never loaded (load_master; a strategy "
             "loads it in load_full_weights, which must come before the first step)");
  const ParamRange& r = ranges_.at(i);
  WEFT_CHECK(param.numel() == r.numel && grad.numel() == r.numel,
             "optimizer range " + std::to_string(i) + " holds " + std::to_string(r.numel) +
                 " elements, got views of " + std::to_string(param.numel()) + " and " +
                 std::to_string(grad.numel()));
  ops::AdamWParams h{static_cast<float>(lr),
                     static_cast<float>(cfg_.beta1),
                     static_cast<float>(cfg_.beta2),
                     static_cast<float>(cfg_.eps),
                     r.decay ? static_cast<float>(cfg_.weight_decay) : 0.0f,
                     step_,
                     grad_scale};
  const int64_t s = state_offset_[i], e = s + r.numel;
  ops::adamw_update(param, grad, exp_avg().slice0(s, e), exp_avg_sq().slice0(s, e), h,
                    master_weights_ ? master().slice0(s, e) : Tensor());
}

void AdamW::load_master(const Tensor& flat_params) {
  if (!master_weights_) return;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const ParamRange& r = ranges_[i];
    assign(master().slice0(state_offset_[i], state_offset_[i] + r.numel),
           flat_params.slice0(r.offset, r.offset + r.numel));
  }
  master_loaded_ = true;
}

void AdamW::load_master(const WeightSource& src) {
  if (!master_weights_) return;
  for (size_t i = 0; i < ranges_.size(); ++i)
    src.read_into(ranges_[i].offset, master().slice0(state_offset_[i], state_offset_[i] + ranges_[i].numel));
  master_loaded_ = true;
}

void AdamW::store_master(Tensor flat_params) const {
  if (!master_weights_) return;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const ParamRange& r = ranges_[i];
    assign(flat_params.slice0(r.offset, r.offset + r.numel),
           master().slice0(state_offset_[i], state_offset_[i] + r.numel));
  }
}

AdamW AdamW::copy_to(Device device) const {
  AdamW out(cfg_, ranges_, device);
  out.load_state(*this);
  return out;
}

void AdamW::load_state(const AdamW& other) {
  WEFT_CHECK(other.ranges_.size() == ranges_.size() && other.state_numel_ == state_numel_,
             "load_state: optimizers of different layouts");
  step_ = other.step_;
  if (state_numel_ == 0) return;
  ops::transfer(exp_avg(), other.exp_avg());
  ops::transfer(exp_avg_sq(), other.exp_avg_sq());
}

std::string optimizer_layout(int rank, int shards, const AdamW& o) {
  std::string l = std::to_string(rank) + " of " + std::to_string(shards) + ":";
  for (const ParamRange& r : o.ranges()) l += " " + std::to_string(r.offset) + "+" + std::to_string(r.numel);
  return l;
}

double lr_at(const OptimConfig& cfg, int64_t step, int64_t total_steps) {
  if (cfg.warmup_steps > 0 && step < cfg.warmup_steps)
    return cfg.lr * static_cast<double>(step + 1) / cfg.warmup_steps;
  const double min_lr = cfg.lr * cfg.min_lr_ratio;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - cfg.warmup_steps);
  double progress = static_cast<double>(step - cfg.warmup_steps) / decay_steps;
  progress = std::min(1.0, std::max(0.0, progress));
  return min_lr + 0.5 * (cfg.lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

double clip_coefficient(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

double clip_grad_norm(Tensor flat_grads, double max_norm) {
  double norm = std::sqrt(ops::sum_squares(flat_grads));
  const double c = clip_coefficient(norm, max_norm);
  if (c != 1.0) ops::scale(flat_grads, static_cast<float>(c));
  return norm;
}

}  // namespace weft
