// IspWeightPool: ISP's weight-parallel half (docs/architecture/isp.md):
// the model's weights and weight gradients for a buffer with
// Storage::Provided, gathered over the wp group into a double-buffered pool
// and reduced back into this rank's shard.
//
// Units, in forward order: the embedding, blocks 0..L-1, the head (final norm
// and LM head). Unit u's full weights live in pool slot u % 2:
//   forward   before_use(u) waits for u's gather (launching it if nobody did)
//             and, with prefetch, launches u+1's into the other slot;
//   backward  the same towards u-1 (the head's weights are still in their slot
//             from forward); weight gradients accumulate into full-size scratch
//             of slot u % 2; a ready parameter's gradient is reduce-scattered
//             (Avg) over wp into a staging shard, added into the shard buffer
//             once complete, and only then reported (`report`, the inner
//             strategy's on_grad_ready); norm gradients are all-reduced (Avg)
//             over wp in place.
// Invariants: every rank issues the same collectives in the same order (the
// model's); reports come in the model's order; a slot is reused only after
// its gather was consumed and its reduce-scatters completed. With wp == 1
// there is no pool: the shard is the whole weight and gradients are reported
// at once.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "kernels/stream_timer.h"
#include "model/param_and_grad_buffer.h"
#include "parallel/grad_sync.h"

namespace weft {

// What the pool's collectives did in one step: spans of its gathers and
// reduce-scatters (together and by kind) and how long compute waited for them.
struct PoolStepStats {
  CommSpans spans;
  double gather_seconds = 0, reduce_scatter_seconds = 0;  // each kind's union of spans
  double gather_wait_seconds = 0, reduce_scatter_wait_seconds = 0;
};

class IspWeightPool : public WeightHook, public WeightProvider {
 public:
  // Installs itself as `model`'s weight hook and provider; `shard` holds this
  // rank's rows (its own hook, the inner strategy's, runs first on each use).
  IspWeightPool(std::shared_ptr<ParamAndGradBuffer> model, std::shared_ptr<ParamAndGradBuffer> shard,
                comm::CommunicatorPtr wp, bool prefetch, std::function<void(int)> report);
  ~IspWeightPool() override;

  // WeightHook, WeightProvider (the model's).
  void before_use(int layer, WeightUse use) override;
  Tensor weight(int i) override;
  Tensor weight_grad(int i) override;
  void zero_grads() override;

  // Backward finished parameter `param`'s gradient: reduce it over wp (or
  // report it at once with wp == 1).
  void grad_ready(int param);
  // Completes every pending reduction (the end of a micro-batch's backward).
  void drain();
  // The shards changed (an optimizer step): gathered weights are stale.
  void drop_gathered();
  // Waits for every gather in flight (checkpoints, the end of a run).
  void flush();
  // This step's figures, then empty.
  PoolStepStats take_step();

  int64_t pool_bytes() const;     // the two weight slots
  int64_t scratch_bytes() const;  // the gradient scratch and its staging

 private:
  int wp_size() const { return wp_ ? wp_->size() : 1; }
  bool sharded(int param) const { return wp_size() > 1 && full_[param].kind != ParamKind::Norm; }
  int unit_of_layer(int layer) const;
  int layer_of_unit(int unit) const;
  void launch_gather(int unit);
  void wait_gather(int unit);  // the unit's slot must hold it
  void free_grad_slot(int slot);
  struct Pending {
    int param;
    int slot;  // -1: a norm all-reduce
    CommSpans::Clock::time_point issued;  // taken before the call: braced init runs left to right
    comm::WorkPtr work;
  };
  void complete_front();

  std::shared_ptr<ParamAndGradBuffer> model_, shard_;
  const std::vector<ParamInfo> full_;
  comm::CommunicatorPtr wp_;
  bool prefetch_;
  std::function<void(int)> report_;
  int n_layers_ = 0;

  // Units: the sharded parameters of each, with their offsets in a pool slot.
  std::vector<std::vector<int>> unit_params_;
  std::vector<int64_t> pool_offset_;  // per parameter (sharded only)
  int64_t slot_numel_ = 0;
  Buffer pool_[2], gpool_[2], gstage_[2];
  int slot_unit_[2] = {-1, -1};   // whose weights the slot holds or receives
  std::vector<comm::WorkPtr> gathers_[2];
  std::vector<CommSpans::Clock::time_point> gathers_issued_[2];
  int gslot_unit_[2] = {-1, -1};  // whose gradients the scratch slot holds
  std::deque<Pending> pending_;

  // This step's gathers and reduce-scatters (they share lanes), and by kind:
  // gathers on two lanes at once count once, as comm does. The waits are
  // timed on the compute stream and read at the step's end.
  CommSpans spans_, gather_spans_, rs_spans_;
  ops::StreamWaits gather_waits_{Device::CPU}, rs_waits_{Device::CPU};
};

}  // namespace weft
