#include "model/param_and_grad_buffer.h"

namespace weft {

ParamAndGradBuffer::ParamAndGradBuffer(std::vector<ParamInfo> table, DType param_dtype,
                                       Device device)
    : table_(std::move(table)), param_dtype_(param_dtype), device_(device) {
  WEFT_CHECK(param_dtype_ == DType::F32 || param_dtype_ == DType::BF16,
             std::string("parameters must be f32 or bf16, got ") + dtype_name(param_dtype_));
  for (const ParamInfo& p : table_) {
    WEFT_CHECK(p.offset == numel_ && p.numel == p.shape.numel(),
               "parameter table is not contiguous at " + p.name);
    numel_ += p.numel;
  }
  params_ = Buffer(static_cast<size_t>(numel_) * dtype_size(param_dtype_), device_);
  grads_ = Buffer(static_cast<size_t>(numel_) * sizeof(float), device_);
}

int ParamAndGradBuffer::find(const std::string& name) const {
  for (size_t i = 0; i < table_.size(); ++i)
    if (table_[i].name == name) return static_cast<int>(i);
  return -1;
}

Tensor ParamAndGradBuffer::param(int i) const {
  const ParamInfo& p = table_.at(i);
  char* base = static_cast<char*>(params_.data()) + p.offset * int64_t(dtype_size(param_dtype_));
  return Tensor(base, param_dtype_, p.shape, device_);
}

Tensor ParamAndGradBuffer::grad(int i) const {
  const ParamInfo& p = table_.at(i);
  return Tensor(static_cast<float*>(grads_.data()) + p.offset, DType::F32, p.shape, device_);
}

}  // namespace weft
