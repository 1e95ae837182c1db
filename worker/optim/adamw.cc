#include "optim/adamw.h"

#include <cmath>

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

AdamW::AdamW(const OptimConfig& cfg, std::vector<ParamRange> ranges, int64_t buffer_numel,
             Device device)
    : cfg_(cfg),
      ranges_(std::move(ranges)),
      numel_(buffer_numel),
      m_(static_cast<size_t>(buffer_numel) * sizeof(float), device),
      v_(static_cast<size_t>(buffer_numel) * sizeof(float), device) {
  for (const ParamRange& r : ranges_)
    WEFT_CHECK(r.offset >= 0 && r.offset + r.numel <= numel_, "optimizer range outside buffer");
}

void AdamW::step(Tensor flat_params, const Tensor& flat_grads, double lr) {
  WEFT_CHECK(flat_params.numel() == numel_ && flat_grads.numel() == numel_,
             "optimizer buffers do not match the parameter buffer");
  ++step_;
  Tensor m = exp_avg(), v = exp_avg_sq();
  for (const ParamRange& r : ranges_) {
    ops::AdamWParams h{static_cast<float>(lr),
                       static_cast<float>(cfg_.beta1),
                       static_cast<float>(cfg_.beta2),
                       static_cast<float>(cfg_.eps),
                       r.decay ? static_cast<float>(cfg_.weight_decay) : 0.0f,
                       step_};
    int64_t b = r.offset, e = r.offset + r.numel;
    ops::adamw_update(flat_params.slice0(b, e), flat_grads.slice0(b, e), m.slice0(b, e),
                      v.slice0(b, e), h);
  }
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

double clip_grad_norm(Tensor flat_grads, double max_norm) {
  double norm = std::sqrt(ops::sum_squares(flat_grads));
  if (max_norm > 0 && norm > max_norm) ops::scale(flat_grads, static_cast<float>(max_norm / (norm + 1e-6)));
  return norm;
}

}  // namespace weft
