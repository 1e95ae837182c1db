// IspShardState: ISP's StrategyState, the translation between the shard
// buffer's layout (this rank's dim-0 rows of every linear, embedding and LM
// head weight, and a full copy of every norm weight, laid out anew) and the
// full model's, for the optimizer state and the weights: what checkpoints
// write and read (each rank its rows, replicated state once), the full
// weights assembled over wp for an export, and loading only this rank's rows.
// The optimizer itself is the inner strategy's (DP or ZeRO over wdp), in the
// shard's layout.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/param_and_grad_buffer.h"
#include "parallel/grad_sync.h"
#include "parallel/sync_state.h"

namespace weft {

class IspShardState : public StrategyState {
 public:
  // `inner` reduces the shards over `wdp`; `flush` waits for the weight
  // pool's gathers.
  IspShardState(std::vector<ParamInfo> full, std::shared_ptr<ParamAndGradBuffer> shard, Device device,
                comm::CommunicatorPtr wp, comm::CommunicatorPtr wdp, const OptimConfig& optim, GradSync& inner,
                std::function<void()> flush);

  void flush() override;
  AdamW& optimizer() override { return inner_.state().optimizer(); }
  bool writes_optimizer_state() const override { return inner_.state().writes_optimizer_state(); }
  bool shards_weights() const override { return true; }
  // Collective over wp: `full` (the full table, owned storage) receives every
  // parameter in full.
  void gather_full_weights(ParamAndGradBuffer& full) override;
  // This rank's rows of `full` into the shard buffer (no communication).
  void load_full_weights(const ParamAndGradBuffer& full) override;
  AdamW export_optimizer() override { return export_state(false, false); }
  void import_optimizer(const AdamW& state) override;
  AdamW export_shard() override { return export_state(true, true); }
  bool load_weights(const WeightSource& src) override;

 private:
  int wp_size() const { return wp_ ? wp_->size() : 1; }
  bool sharded(int param) const { return wp_size() > 1 && full_[param].kind != ParamKind::Norm; }
  // Optimizer ranges in the full model's layout: owned_only, each element
  // once over the ranks (what a checkpoint writes), else every range this
  // rank steps (what it loads); with `weights` the ranges' f32 weights as
  // the master copy.
  AdamW export_state(bool owned_only, bool weights);
  int param_at(int64_t shard_offset) const;          // the parameter holding a shard-buffer element
  int64_t model_offset(int64_t shard_offset) const;  // its offset in the full model's layout

  const std::vector<ParamInfo> full_;
  std::shared_ptr<ParamAndGradBuffer> shard_;
  Device device_;
  comm::CommunicatorPtr wp_, wdp_;
  OptimConfig optim_;
  GradSync& inner_;
  std::function<void()> flush_;
};

}  // namespace weft
