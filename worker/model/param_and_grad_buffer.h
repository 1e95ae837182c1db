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
//     a no-op.
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

class ParamAndGradBuffer {
 public:
  // `table` must be laid out contiguously from offset 0 (llama_param_table is).
  explicit ParamAndGradBuffer(std::vector<ParamInfo> table, DType param_dtype = DType::F32,
                              Device device = Device::CPU);

  const std::vector<ParamInfo>& params() const { return table_; }
  int64_t numel() const { return numel_; }
  DType param_dtype() const { return param_dtype_; }
  Device device() const { return device_; }
  int find(const std::string& name) const;  // -1 if absent

  Tensor param(int i) const;  // working dtype, the table's shape
  Tensor grad(int i) const;   // f32
  Tensor flat_params() const { return params_.as(param_dtype_, {numel_}); }
  Tensor flat_grads() const { return grads_.as(DType::F32, {numel_}); }
  void zero_grads() { grads_.zero(); }

  size_t param_bytes() const { return params_.bytes(); }
  size_t grad_bytes() const { return grads_.bytes(); }

  // Not owned; nullptr removes it.
  void set_weight_hook(WeightHook* hook) { hook_ = hook; }
  void before_use(int layer, WeightUse use) const {
    if (hook_) hook_->before_use(layer, use);
  }

 private:
  std::vector<ParamInfo> table_;
  DType param_dtype_;
  Device device_;
  int64_t numel_ = 0;
  Buffer params_, grads_;
  WeightHook* hook_ = nullptr;
};

}  // namespace weft
