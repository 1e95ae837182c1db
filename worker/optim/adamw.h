// AdamW with decoupled weight decay over the ranges of the flat parameter
// buffer that this rank owns.
//
// Owns the fp32 moments (exp_avg, exp_avg_sq) and, for mixed precision, an
// fp32 master copy of the owned parameters, all COMPACT: state for the owned
// ranges only, range i's at state_offset(i), in range order. A replicated
// strategy owns every parameter (state is then laid out like the parameter
// buffer); a ZeRO shard owns 1/N of it and holds 1/N of the state.
//
// A range shares one weight decay; by default linear weights decay and
// norms/embeddings do not (OptimConfig::decay_norms_and_embeddings).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/param_info.h"
#include "model/weight_source.h"
#include "tensor/tensor.h"
#include "config/config.h"

namespace weft {

struct ParamRange {
  int64_t offset = 0;  // into the flat param/grad buffers
  int64_t numel = 0;
  bool decay = true;
};

// One range per parameter, decay chosen by kind and config.
std::vector<ParamRange> default_param_ranges(const std::vector<ParamInfo>& table,
                                             const OptimConfig& cfg);
// The parts of `ranges` inside [begin, end), in order (a shard of the layout).
std::vector<ParamRange> ranges_within(const std::vector<ParamRange>& ranges, int64_t begin,
                                      int64_t end);

class AdamW {
 public:
  // master_weights: keep an fp32 master copy of the owned ranges (the working
  // parameters are then bf16, or an f32 copy); load it with load_master().
  AdamW(const OptimConfig& cfg, std::vector<ParamRange> ranges, Device device = Device::CPU,
        bool master_weights = false);

  // One step over all owned ranges: begin_step() then step_range() for each.
  // The gradients are taken times grad_scale (a clipping coefficient, applied
  // as they are read: the same values as scaling them first, one pass fewer).
  void step(Tensor flat_params, const Tensor& flat_grads, double lr, float grad_scale = 1.0f);

  // The pieces of step(), for strategies that step ranges as their gradients
  // arrive (ZeRO's interleaved step): begin_step() once per optimizer step,
  // then each owned range exactly once. `param` and `grad` are views of
  // exactly range i (grad f32; param in the working dtype).
  void begin_step() { ++step_; }
  void step_range(size_t i, Tensor param, const Tensor& grad, double lr, float grad_scale = 1.0f);

  // master = the owned ranges of flat_params (after init or a checkpoint
  // load); flat_params may be of any float dtype and on any device (an f32
  // host copy keeps the master exact when the working weights are bf16).
  // The only way the master copy is set: a step before it aborts.
  void load_master(const Tensor& flat_params);
  // The same, reading the owned ranges from `src` (full-model flat layout)
  // and nothing else.
  void load_master(const WeightSource& src);
  // The master copy's owned ranges into flat_params (any dtype and device);
  // a no-op without a master copy.
  void store_master(Tensor flat_params) const;

  // What a checkpoint holds of the optimizer: the moments and the step count,
  // never the master copy (that is the weights', loaded with them through
  // load_master). copy_to: the ranges and that state on `device`, without a
  // master copy (checkpoints of device state go through a host copy);
  // load_state: that state from an optimizer of the same ranges, leaving the
  // master copy alone, so weights and state load in either order.
  AdamW copy_to(Device device) const;
  void load_state(const AdamW& other);
  Device device() const { return m_.device(); }

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t s) { step_ = s; }
  const std::vector<ParamRange>& ranges() const { return ranges_; }
  int64_t state_offset(size_t i) const { return state_offset_.at(i); }
  int64_t state_numel() const { return state_numel_; }  // elements per state tensor
  // Bytes of optimizer state held (moments, plus the master copy if any).
  int64_t state_bytes() const;
  bool has_master() const { return master_weights_; }

  Tensor exp_avg() const { return m_.as(DType::F32, {state_numel_}); }
  Tensor exp_avg_sq() const { return v_.as(DType::F32, {state_numel_}); }
  Tensor master() const { return master_.as(DType::F32, {master_weights_ ? state_numel_ : 0}); }

 private:
  OptimConfig cfg_;
  std::vector<ParamRange> ranges_;
  std::vector<int64_t> state_offset_;
  int64_t state_numel_ = 0;
  bool master_weights_ = false;
  bool master_loaded_ = false;  // load_master ran (only meaningful with master_weights_)
  Buffer m_, v_, master_;
  int64_t step_ = 0;
};

// Cosine decay to lr*min_lr_ratio after a linear warmup; step is 0-based.
double lr_at(const OptimConfig& cfg, int64_t step, int64_t total_steps);

// The layout a checkpoint records for the optimizer ranges `o` held by rank
// `rank` of `shards` ("R of N: offset+numel ..."); a resume compares it.
std::string optimizer_layout(int rank, int shards, const AdamW& o);

// Global L2 norm of grads; scales them to max_norm when larger (max_norm > 0).
// Returns the norm before clipping.
double clip_grad_norm(Tensor flat_grads, double max_norm);
// The clip factor for a known global norm: 1 when no clipping applies.
double clip_coefficient(double norm, double max_norm);

}  // namespace weft
