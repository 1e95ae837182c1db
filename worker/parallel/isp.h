// ISP (intern sequence parallelism) as a GradSync (docs/architecture.md
// "ISP"): weight-parallel linears over
// `wp` with a prefetched, double-buffered all-gather pool, gradient
// reduce-scatter over `wp`, shard gradients reduced over `wdp` by an inner
// strategy (plain DP or ZeRO), and the Ulysses all-to-all over `sp`.
//
// Owns the shard buffer (this rank's dim-0 rows of every linear, embedding and
// LM head weight, and a full copy of every norm weight: what the optimizer,
// the wdp buckets and checkpoints see), the inner GradSync (DataParallel or
// ZeroGradSync, whose BucketEngine syncs the shard over wdp), the weight pool
// and the gradient scratch. The model's buffer (Storage::Provided) is not
// owned; this strategy installs itself as its WeightHook and WeightProvider,
// and gives the model its SequenceExchange.
//
// Units, in forward order: the embedding, blocks 0..L-1, the head (final norm
// and LM head). Unit u's full weights live in pool slot u % 2:
//   forward   before_use(u) waits for u's gather (launching it if nobody did)
//             and, with prefetch, launches u+1's into the other slot;
//   backward  the same towards u-1 (the head's weights are still in their slot
//             from forward); weight gradients accumulate into full-size scratch
//             of slot u % 2; a ready parameter's gradient is reduce-scattered
//             (Avg) over wp into a staging shard, added into the shard buffer
//             once complete, and only then reported to the inner strategy;
//             norm gradients are all-reduced (Avg) over wp in place.
// Invariants: every rank issues the same collectives in the same order (the
// model's); the inner strategy sees on_grad_ready in the model's order; a
// slot is reused only after its gather was consumed and its reduce-scatters
// completed; gathered weights are dropped after every optimizer step. With
// wp == 1 there is no pool: the shard is the whole weight.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "kernels/stream_timer.h"
#include "model/param_and_grad_buffer.h"
#include "model/sequence_exchange.h"
#include "parallel/grad_sync.h"

namespace weft {

struct IspGroups {
  comm::CommunicatorPtr sp, wp, wdp;  // any may be null (size 1)
};

struct IspOptions {
  bool prefetch = true;
  WdpStrategy wdp_strategy = WdpStrategy::Dp;
};

// The shard table: llama-style `full` with every non-norm parameter cut to
// its rows [r*out/wp, (r+1)*out/wp) (the same for every r), laid out anew.
std::vector<ParamInfo> isp_shard_table(const std::vector<ParamInfo>& full, int wp);

class IspGradSync : public GradSync, public StrategyState, private WeightHook, private WeightProvider, private SequenceExchange {
 public:
  StrategyState& state() override { return *this; }
  // `model_buffer` holds the full table with Storage::Provided.
  IspGradSync(const WorkerConfig& cfg, std::shared_ptr<ParamAndGradBuffer> model_buffer, IspGroups groups);
  ~IspGradSync() override;

  // The model's attention exchange; nullptr when sp == 1.
  SequenceExchange* sequence_exchange() override { return sp_size() > 1 ? this : nullptr; }
  const ParamAndGradBuffer& shard_buffer() const { return *shard_; }
  bool shards_weights() const override { return true; }
  // Collective over wp: `full` (the full table, owned storage) receives every
  // parameter in full.
  void gather_full_weights(ParamAndGradBuffer& full) override;
  // This rank's rows of `full` into the shard buffer (no communication).
  void load_full_weights(const ParamAndGradBuffer& full) override;
  int64_t pool_bytes() const;
  AdamW export_optimizer() override { return export_state(false, false); }
  void import_optimizer(const AdamW& state) override;
  AdamW export_shard() override { return export_state(true, true); }
  bool load_weights(const WeightSource& src) override;

  void start() override;
  void prepare_step(double lr, double max_norm) override { inner_->prepare_step(lr, max_norm); }
  void begin_micro_batch(bool last) override;
  void on_grad_ready(int param) override;
  double finish_micro_batch(double loss) override;
  double clip_and_step(double lr, double max_norm) override;
  void rebucket(double cap_mb, int64_t step) override { inner_->rebucket(cap_mb, step); }
  void flush() override;

  AdamW& optimizer() override { return inner_->state().optimizer(); }
  bool writes_optimizer_state() const override { return inner_->state().writes_optimizer_state(); }
  const StepCommStats& last_step() const override { return last_; }
  const comm::Communicator* group() const override { return wdp_.get(); }
  int bucket_count() const override { return inner_->bucket_count(); }
  double bucket_cap_mb() const override { return inner_->bucket_cap_mb(); }
  StateBytes state_bytes() const override;
  std::string describe() const override;

 private:
  // WeightHook
  void before_use(int layer, WeightUse use) override;
  // WeightProvider
  Tensor weight(int i) override;
  Tensor weight_grad(int i) override;
  void zero_grads() override;
  // SequenceExchange
  int size() const override { return sp_size(); }
  int rank() const override { return sp_ ? sp_->rank() : 0; }
  void to_heads(Tensor out, const Tensor& in) override;
  void to_sequence(Tensor out, const Tensor& in) override;

  int sp_size() const { return sp_ ? sp_->size() : 1; }
  int wp_size() const { return wp_ ? wp_->size() : 1; }
  // Optimizer ranges in the full model's layout: owned_only, each element
  // once over the ranks (what a checkpoint writes), else every range this
  // rank steps (what it loads); with `weights` the ranges' f32 weights as
  // the master copy.
  AdamW export_state(bool owned_only, bool weights);
  bool sharded(int param) const { return wp_size() > 1 && full_[param].kind != ParamKind::Norm; }
  int param_at(int64_t shard_offset) const;  // the parameter holding a shard-buffer element
  int64_t model_offset(int64_t shard_offset) const;  // its offset in the full model's layout
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
  void exchange(Tensor out, const Tensor& in, bool to_heads);

  std::shared_ptr<ParamAndGradBuffer> model_;
  std::vector<ParamInfo> full_;
  std::shared_ptr<ParamAndGradBuffer> shard_;
  comm::CommunicatorPtr sp_, wp_, wdp_;
  IspOptions o_;
  OptimConfig optim_;
  std::unique_ptr<GradSync> inner_;
  int n_layers_ = 0;

  // Units: the sharded parameters of each, with their offsets in a pool slot.
  std::vector<std::vector<int>> unit_params_;
  std::vector<int64_t> pool_offset_;  // per parameter (sharded only)
  int64_t slot_numel_ = 0;
  Buffer pool_[2], gpool_[2], gstage_[2];
  int slot_unit_[2] = {-1, -1};   // whose weights the slot holds or receives
  std::vector<comm::WorkPtr> gathers_[2];
  std::vector<CommSpans::Clock::time_point> gathers_issued_[2];
  CommSpans spans_;  // this step's gathers and reduce-scatters (they share lanes)
  // The same, by kind: gathers on two lanes at once count once, as comm does.
  CommSpans gather_spans_, rs_spans_;
  int gslot_unit_[2] = {-1, -1};  // whose gradients the scratch slot holds
  std::deque<Pending> pending_;
  bool last_micro_ = true;
  float loss_wire_ = 0;
  Buffer send_, recv_;  // all-to-all staging, on the model's device

  // This step's ISP accounting so far; last_ = the inner's plus these. The
  // waits, the all-to-alls included (compute waits for the whole exchange),
  // are timed on the compute stream and read at the step's end.
  ops::StreamWaits gather_waits_{Device::CPU}, rs_waits_{Device::CPU}, a2a_waits_{Device::CPU};
  StepCommStats last_;
};

}  // namespace weft
