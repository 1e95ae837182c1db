// ParamAndGradBuffer: the model's parameters in one flat buffer of the working
// dtype (f32 on the CPU by default, bf16 for mixed precision) and their
// gradients in one flat fp32 buffer (`main_grad`) with the same layout.
//
// Owns both buffers and the parameter table. The model reads its weights and
// writes its gradients through views of them; gradient sync strategies bucket
// contiguous ranges of the same layout; the optimizer steps ranges of it.
//
// Invariants:
//   - the layout is the table's: parameter i occupies [offset, offset+numel)
//     in both buffers, parameters in BACKWARD order (the first is the first
//     whose gradient is final during backward), so buckets fill front to back;
//   - gradients are always fp32, whatever the working dtype;
//   - before the model uses a layer's weights it calls before_use(layer, use):
//     the hook point where a strategy that shards weights (ISP, ZeRO with
//     overlapped parameter gathers) makes them present. Without a hook it is
//     a no-op;
//   - a buffer built with Storage::Provided holds the table but no memory: a
//     WeightProvider (ISP: weight shards elsewhere, full weights gathered into
//     a pool) supplies the view of every parameter and gradient the model
//     touches. flat_params()/flat_grads() are then not available.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/param_info.h"
#include "tensor/tensor.h"

namespace weft {

enum class WeightUse : uint8_t { Forward, Backward };

class WeightHook {
 public:
  virtual ~WeightHook() = default;
  // Called before the model reads the weights of `layer` (a block index,
  // kEmbeddingLayer or kHeadLayer) in the forward or the backward pass.
  virtual void before_use(int layer, WeightUse use) = 0;
};

// Supplies the model's weight and weight-gradient views for a buffer with
// Storage::Provided. weight(i) is valid from before_use of its layer until the
// model moves on to the next layer's before_use; grad(i) likewise, and the
// model accumulates (+=) into it.
class WeightProvider {
 public:
  virtual ~WeightProvider() = default;
  virtual Tensor weight(int i) = 0;
  virtual Tensor weight_grad(int i) = 0;
  virtual void zero_grads() = 0;
};

enum class Storage : uint8_t { Owned, Provided };

// dst = src converted to dst's dtype (f32 <-> bf16, rounding to nearest even)
// and moved to dst's device: how weights travel between the host f32 copies
// that init, Hugging Face files and checkpoints use and the working (maybe
// bf16, maybe device) buffers. Same numel.
void assign(Tensor dst, const Tensor& src);

class ParamAndGradBuffer {
 public:
  // `table` must be laid out contiguously from offset 0 (llama_param_table is).
  explicit ParamAndGradBuffer(std::vector<ParamInfo> table, DType param_dtype = DType::F32,
                              Device device = Device::CPU, Storage storage = Storage::Owned);

  const std::vector<ParamInfo>& params() const { return table_; }
  int64_t numel() const { return numel_; }
  DType param_dtype() const { return param_dtype_; }
  Device device() const { return device_; }
  int find(const std::string& name) const;  // -1 if absent

  Tensor param(int i) const;  // working dtype, the table's shape
  Tensor grad(int i) const;   // f32
  Tensor flat_params() const;
  Tensor flat_grads() const;
  void zero_grads();
  // All parameters from / to a flat tensor of any float dtype on any device
  // (assign); Storage::Owned only.
  void load_params(const Tensor& flat);
  void store_params(Tensor flat) const;
  bool owns_storage() const { return storage_ == Storage::Owned; }

  size_t param_bytes() const { return params_.bytes(); }
  size_t grad_bytes() const { return grads_.bytes(); }

  // Not owned; nullptr removes it.
  void set_weight_hook(WeightHook* hook) { hook_ = hook; }
  void before_use(int layer, WeightUse use) const {
    if (hook_) hook_->before_use(layer, use);
  }
  // Not owned; required (and only allowed) with Storage::Provided.
  void set_weight_provider(WeightProvider* provider);

 private:
  std::vector<ParamInfo> table_;
  DType param_dtype_;
  Device device_;
  int64_t numel_ = 0;
  Storage storage_;
  Buffer params_, grads_;
  WeightHook* hook_ = nullptr;
  WeightProvider* provider_ = nullptr;
};

}  // namespace weft
