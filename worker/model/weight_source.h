// WeightSource: a model's weights in its flat parameter layout, read by range
// at full precision (f32): the files of a sharded checkpoint, a Hugging Face
// directory, or the seeded initial draw. A rank that keeps only part of the
// model (ISP's weight shard, ZeRO's master copy) reads just that part through
// it, so no rank needs the whole model in memory to start or resume.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "model/param_and_grad_buffer.h"
#include "model/param_info.h"
#include "tensor/tensor.h"

namespace weft {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Elements [offset, offset + dst.numel()) of the flat layout into dst, a
  // contiguous host F32 tensor. Throws (CheckpointError for files) when the
  // range is not there.
  virtual void read(int64_t offset, Tensor dst) const = 0;
  // The same into a tensor of any dtype and device, through a host f32 copy.
  void read_into(int64_t offset, Tensor dst) const {
    if (dst.dtype == DType::F32 && dst.device == Device::CPU) return read(offset, dst);
    std::vector<float> host(static_cast<size_t>(dst.numel()));
    Tensor h = Tensor::f32(host.data(), {dst.numel()});
    read(offset, h);
    assign(dst.view({dst.numel()}), h);
  }
  // Every parameter of `buffer`, its table's offsets taken in this source's
  // layout (the same model's), in the buffer's dtype and on its device.
  void read_params_into(const ParamAndGradBuffer& buffer) const {
    for (size_t i = 0; i < buffer.params().size(); ++i)
      read_into(buffer.params()[i].offset, buffer.param(static_cast<int>(i)));
  }
};

// A source that holds weights per tensor of a parameter table: a range of the
// flat layout is read piece by piece from the tensors it spans.
class PerParamWeightSource : public WeightSource {
 public:
  explicit PerParamWeightSource(std::vector<ParamInfo> table) : table_(std::move(table)) {}
  const std::vector<ParamInfo>& table() const { return table_; }
  void read(int64_t offset, Tensor dst) const override {
    const int64_t n = dst.numel();
    if (n == 0) return;
    float* out = dst.f32();
    // The last parameter starting at or before offset.
    auto it = std::upper_bound(table_.begin(), table_.end(), offset,
                               [](int64_t o, const ParamInfo& p) { return o < p.offset; });
    WEFT_CHECK(it != table_.begin() && offset >= 0, "weights: offset " + std::to_string(offset) + " outside the model");
    for (--it; n > 0 && it != table_.end(); ++it) {
      const int64_t b = std::max(offset, it->offset), e = std::min(offset + n, it->offset + it->numel);
      if (b >= e) break;
      read_param(*it, b - it->offset, Tensor::f32(out + (b - offset), {e - b}));
      if (e == offset + n) return;
    }
    WEFT_CHECK(false, "weights: [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
                          ") extends past the model");
  }

 protected:
  // Elements [first, first + dst.numel()) of parameter p into dst (host f32).
  virtual void read_param(const ParamInfo& p, int64_t first, Tensor dst) const = 0;

 private:
  std::vector<ParamInfo> table_;
};

}  // namespace weft
