#include "model/param_and_grad_buffer.h"

#include "kernels/ops.h"

namespace weft {

void assign(Tensor dst, const Tensor& src) {
  WEFT_CHECK(dst.numel() == src.numel(), "assign: " + std::to_string(src.numel()) + " elements into " +
                                             std::to_string(dst.numel()));
  if (dst.dtype == src.dtype) return ops::transfer(dst, src);
  if (dst.device == src.device) return ops::cast(dst, src);
  // Convert where the destination is (a device converts faster than the host
  // and the wire then carries the source's bytes).
  Buffer staging(src.nbytes(), dst.device);
  Tensor s = staging.as(src.dtype, {src.numel()});
  ops::transfer(s, src.view({src.numel()}));
  ops::cast(dst.view({dst.numel()}), s);
}

ParamAndGradBuffer::ParamAndGradBuffer(std::vector<ParamInfo> table, DType param_dtype,
                                       Device device, Storage storage)
    : table_(std::move(table)), param_dtype_(param_dtype), device_(device), storage_(storage) {
  WEFT_CHECK(param_dtype_ == DType::F32 || param_dtype_ == DType::BF16,
             std::string("parameters must be f32 or bf16, got ") + dtype_name(param_dtype_));
  for (const ParamInfo& p : table_) {
    WEFT_CHECK(p.offset == numel_ && p.numel == p.shape.numel(),
               "parameter table is not contiguous at " + p.name);
    numel_ += p.numel;
  }
  if (storage_ == Storage::Provided) return;
  params_ = Buffer(static_cast<size_t>(numel_) * dtype_size(param_dtype_), device_);
  grads_ = Buffer(static_cast<size_t>(numel_) * sizeof(float), device_);
}

void ParamAndGradBuffer::set_weight_provider(WeightProvider* provider) {
  WEFT_CHECK(storage_ == Storage::Provided || provider == nullptr,
             "a weight provider replaces the storage of a buffer built with Storage::Provided only");
  provider_ = provider;
}

Tensor ParamAndGradBuffer::flat_params() const {
  WEFT_CHECK(storage_ == Storage::Owned, "flat_params: this buffer's weights are provided, not held");
  return params_.as(param_dtype_, {numel_});
}

Tensor ParamAndGradBuffer::flat_grads() const {
  WEFT_CHECK(storage_ == Storage::Owned, "flat_grads: this buffer's gradients are provided, not held");
  return grads_.as(DType::F32, {numel_});
}

void ParamAndGradBuffer::zero_grads() {
  if (storage_ == Storage::Owned) return grads_.zero();
  WEFT_CHECK(provider_ != nullptr, "zero_grads: no weight provider installed");
  provider_->zero_grads();
}

void ParamAndGradBuffer::load_params(const Tensor& flat) { assign(flat_params(), flat); }

void ParamAndGradBuffer::store_params(Tensor flat) const { assign(flat, flat_params()); }

int ParamAndGradBuffer::find(const std::string& name) const {
  for (size_t i = 0; i < table_.size(); ++i)
    if (table_[i].name == name) return static_cast<int>(i);
  return -1;
}

Tensor ParamAndGradBuffer::param(int i) const {
  const ParamInfo& p = table_.at(i);
  if (storage_ == Storage::Provided) {
    WEFT_CHECK(provider_ != nullptr, "param " + p.name + ": no weight provider installed");
    return provider_->weight(i);
  }
  char* base = static_cast<char*>(params_.data()) + p.offset * int64_t(dtype_size(param_dtype_));
  return Tensor(base, param_dtype_, p.shape, device_);
}

Tensor ParamAndGradBuffer::grad(int i) const {
  const ParamInfo& p = table_.at(i);
  if (storage_ == Storage::Provided) {
    WEFT_CHECK(provider_ != nullptr, "grad " + p.name + ": no weight provider installed");
    return provider_->weight_grad(i);
  }
  return Tensor(static_cast<float*>(grads_.data()) + p.offset, DType::F32, p.shape, device_);
}

}  // namespace weft
