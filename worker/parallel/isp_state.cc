#include "parallel/isp_state.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "kernels/ops.h"

namespace weft {

namespace {

Tensor flat(const Tensor& t) { return t.view({t.numel()}); }

}  // namespace

IspShardState::IspShardState(std::vector<ParamInfo> full, std::shared_ptr<ParamAndGradBuffer> shard, Device device,
                             comm::CommunicatorPtr wp, comm::CommunicatorPtr wdp, const OptimConfig& optim,
                             GradSync& inner, std::function<void()> flush)
    : full_(std::move(full)),
      shard_(std::move(shard)),
      device_(device),
      wp_(std::move(wp)),
      wdp_(std::move(wdp)),
      optim_(optim),
      inner_(inner),
      flush_(std::move(flush)) {}

void IspShardState::flush() {
  inner_.state().flush();
  flush_();
}

void IspShardState::gather_full_weights(ParamAndGradBuffer& full) {
  flush();
  WEFT_CHECK(full.params().size() == full_.size(), "gather_full: another parameter table");
  // The inner strategy's full-precision shard (its master copy where there
  // is one, collective over wdp), then each sharded parameter's rows from
  // every wp rank, in f32 on the model's device.
  ParamAndGradBuffer part(shard_->params(), DType::F32, device_);
  inner_.state().gather_full_weights(part);
  for (size_t i = 0; i < full_.size(); ++i) {
    const int p = static_cast<int>(i);
    if (!sharded(p)) {
      assign(flat(full.param(p)), flat(part.param(p)));
      continue;
    }
    Buffer rows(static_cast<size_t>(full_[i].numel) * sizeof(float), device_);
    const Tensor all = rows.as(DType::F32, {full_[i].numel});
    wp_->all_gather(flat(part.param(p)), all, {}, "gather " + full_[i].name)->wait();
    assign(flat(full.param(p)), all);
  }
}

void IspShardState::load_full_weights(const ParamAndGradBuffer& full) {
  WEFT_CHECK(full.params().size() == full_.size(), "load_full: another parameter table");
  // This rank's rows, as the inner strategy's full model: it loads the
  // working weights and the master copy from them.
  const int r = wp_ ? wp_->rank() : 0;
  ParamAndGradBuffer part(shard_->params(), DType::F32, Device::CPU);
  for (size_t i = 0; i < full_.size(); ++i) {
    const int p = static_cast<int>(i);
    const int64_t rows = shard_->params()[i].shape[0];
    assign(flat(part.param(p)), flat(sharded(p) ? full.param(p).slice0(r * rows, (r + 1) * rows) : full.param(p)));
  }
  inner_.state().load_full_weights(part);
}

// ---- checkpoints ------------------------------------------------------------

namespace {

// The shard buffer's flat layout read from a source in the full model's: a
// shard parameter is one contiguous range there (its rows), so a read splits
// at shard parameter boundaries and maps each piece.
class ShardLayoutSource : public WeightSource {
 public:
  ShardLayoutSource(const WeightSource& full, const std::vector<ParamInfo>& shard,
                    std::function<int64_t(int64_t)> model_offset)
      : full_(full), shard_(shard), model_offset_(std::move(model_offset)) {}
  void read(int64_t offset, Tensor dst) const override {
    const int64_t n = dst.numel();
    for (int64_t done = 0; done < n;) {
      const int64_t at = offset + done;
      auto it = std::upper_bound(shard_.begin(), shard_.end(), at,
                                 [](int64_t o, const ParamInfo& p) { return o < p.offset; });
      WEFT_CHECK(it != shard_.begin(), "ISP weights: offset " + std::to_string(at) + " outside the shard");
      --it;
      const int64_t take = std::min(n - done, it->offset + it->numel - at);
      WEFT_CHECK(take > 0, "ISP weights: [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
                               ") extends past the shard");
      full_.read(model_offset_(at), Tensor::f32(dst.f32() + done, {take}));
      done += take;
    }
  }

 private:
  const WeightSource& full_;
  const std::vector<ParamInfo>& shard_;
  std::function<int64_t(int64_t)> model_offset_;
};

}  // namespace

bool IspShardState::load_weights(const WeightSource& src) {
  // A sharded parameter's rows [r * rows, (r + 1) * rows) are one contiguous
  // range of the full model's: read just those, into the working weights
  // and, at full precision, into the inner optimizer's master copy (if any).
  const int r = wp_ ? wp_->rank() : 0;
  for (size_t i = 0; i < full_.size(); ++i) {
    const int p = static_cast<int>(i);
    const int64_t n = shard_->params()[i].numel;
    src.read_into(full_[i].offset + (sharded(p) ? int64_t(r) * n : 0), shard_->param(p));
  }
  inner_.state().optimizer().load_master(
      ShardLayoutSource(src, shard_->params(), [this](int64_t at) { return model_offset(at); }));
  return true;
}

int IspShardState::param_at(int64_t shard_offset) const {
  const auto& t = shard_->params();
  auto it = std::upper_bound(t.begin(), t.end(), shard_offset,
                             [](int64_t o, const ParamInfo& p) { return o < p.offset; });
  return std::max(0, static_cast<int>(it - t.begin()) - 1);
}

int64_t IspShardState::model_offset(int64_t shard_offset) const {
  const int i = param_at(shard_offset);
  const ParamInfo& s = shard_->params()[i];
  const int64_t rows_before = sharded(i) ? int64_t(wp_->rank()) * s.numel : 0;
  return full_[i].offset + rows_before + (shard_offset - s.offset);
}

AdamW IspShardState::export_state(bool owned_only, bool weights) {
  flush();
  const AdamW& opt = inner_.state().optimizer();
  // Replicated state is written once: norms by wp rank 0, and with plain DP
  // over wdp (every wdp rank holds the same state) by wdp rank 0.
  const bool wdp_first = !wdp_ || wdp_->rank() == 0 || inner_.state().optimizer_shards() > 1;
  const bool wp_first = !wp_ || wp_->rank() == 0;
  std::vector<ParamRange> ranges;
  std::vector<size_t> from;
  for (size_t i = 0; i < opt.ranges().size(); ++i) {
    const ParamRange& r = opt.ranges()[i];
    const bool norm = full_[param_at(r.offset)].kind == ParamKind::Norm;
    if (owned_only && (!wdp_first || (norm && !wp_first))) continue;
    ranges.push_back({model_offset(r.offset), r.numel, r.decay});
    from.push_back(i);
  }
  AdamW out(optim_, ranges, Device::CPU, /*master_weights=*/weights);
  const Tensor shard_params = weights ? shard_->flat_params() : Tensor();
  for (size_t k = 0; k < from.size(); ++k) {
    const int64_t n = ranges[k].numel, src = opt.state_offset(from[k]), dst = out.state_offset(k);
    ops::transfer(out.exp_avg().slice0(dst, dst + n), opt.exp_avg().slice0(src, src + n));
    ops::transfer(out.exp_avg_sq().slice0(dst, dst + n), opt.exp_avg_sq().slice0(src, src + n));
    if (weights) {
      // The master copy where there is one (bf16 working weights), else the
      // f32 working weights of the range (in the shard's layout).
      const int64_t at = opt.ranges()[from[k]].offset;
      assign(out.master().slice0(dst, dst + n),
             opt.has_master() ? opt.master().slice0(src, src + n) : shard_params.slice0(at, at + n));
    }
  }
  out.set_step_count(opt.step_count());
  return out;
}

void IspShardState::import_optimizer(const AdamW& state) {
  AdamW& opt = inner_.state().optimizer();
  WEFT_CHECK(state.ranges().size() == opt.ranges().size(), "import_optimizer: another range list");
  for (size_t k = 0; k < opt.ranges().size(); ++k) {
    const int64_t n = opt.ranges()[k].numel, src = state.state_offset(k), dst = opt.state_offset(k);
    WEFT_CHECK(state.ranges()[k].numel == n, "import_optimizer: another range list");
    ops::transfer(opt.exp_avg().slice0(dst, dst + n), state.exp_avg().slice0(src, src + n));
    ops::transfer(opt.exp_avg_sq().slice0(dst, dst + n), state.exp_avg_sq().slice0(src, src + n));
  }
  opt.set_step_count(state.step_count());
}

}  // namespace weft
