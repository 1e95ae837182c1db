// AdamW with decoupled weight decay over parameter groups.
//
// Owns the fp32 moment buffers (exp_avg, exp_avg_sq), laid out like the flat
// parameter buffer it steps (same offsets), and the step counter. A group is a
// set of contiguous ranges sharing a weight decay; by default linear weights
// decay and norms/embeddings do not (OptimConfig::decay_norms_and_embeddings).
// The optimizer only ever touches the ranges it was given, so a ZeRO shard can
// own a subset of the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/llama.h"
#include "tensor/tensor.h"
#include "train/config.h"

namespace weft {

struct ParamRange {
  int64_t offset = 0;  // into the flat param/grad buffers
  int64_t numel = 0;
  bool decay = true;
};

// One range per parameter, decay chosen by kind and config.
std::vector<ParamRange> default_param_ranges(const std::vector<ParamInfo>& table,
                                             const OptimConfig& cfg);

class AdamW {
 public:
  AdamW(const OptimConfig& cfg, std::vector<ParamRange> ranges, int64_t buffer_numel,
        Device device = Device::CPU);

  // One step over all ranges at learning rate lr; increments step().
  void step(Tensor flat_params, const Tensor& flat_grads, double lr);

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t s) { step_ = s; }
  Tensor exp_avg() const { return m_.as(DType::F32, {numel_}); }
  Tensor exp_avg_sq() const { return v_.as(DType::F32, {numel_}); }
  const std::vector<ParamRange>& ranges() const { return ranges_; }

 private:
  OptimConfig cfg_;
  std::vector<ParamRange> ranges_;
  int64_t numel_;
  Buffer m_, v_;
  int64_t step_ = 0;
};

// Cosine decay to lr*min_lr_ratio after a linear warmup; step is 0-based.
double lr_at(const OptimConfig& cfg, int64_t step, int64_t total_steps);

// Global L2 norm of grads; scales them to max_norm when larger (max_norm > 0).
// Returns the norm before clipping.
double clip_grad_norm(Tensor flat_grads, double max_norm);

}  // namespace weft
