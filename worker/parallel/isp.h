// ISP (intern sequence parallelism) as a GradSync (docs/architecture/isp.md,
// "ISP"), composed of four parts:
//   IspWeightPool    weight-parallel linears over `wp`: a prefetched,
//                    double-buffered all-gather pool and the gradient
//                    reduce-scatter over wp (parallel/isp_weight_pool.h);
//   UlyssesExchange  the all-to-all around attention over `sp`
//                    (parallel/ulysses_exchange.h);
//   the inner strategy reducing the shard gradients over `wdp`: plain DP or
//                    ZeRO, built by the factory (make_grad_sync, with
//                    make_replica_sync over the shard buffer) and passed in;
//   IspShardState    the shard layout's translation for checkpoints and
//                    weights (parallel/isp_state.h), its StrategyState.
// Holds the shard buffer (this rank's dim-0 rows of every linear, embedding and
// LM head weight, and a full copy of every norm weight: what the optimizer,
// the wdp buckets and checkpoints see; isp_shard_buffer makes it). The model's buffer
// (Storage::Provided) is not owned; the pool is its WeightHook and
// WeightProvider, the exchange its SequenceExchange.
// Invariants: every rank issues the same collectives in the same order (the
// model's); the inner strategy sees on_grad_ready in the model's order;
// gathered weights are dropped after every optimizer step.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/param_and_grad_buffer.h"
#include "model/sequence_exchange.h"
#include "parallel/grad_sync.h"
#include "parallel/isp_state.h"
#include "parallel/isp_weight_pool.h"
#include "parallel/ulysses_exchange.h"

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
// The shard buffer of a model buffer split over `wp` ranks (its dtype and
// device): what the inner strategy reduces over wdp.
std::shared_ptr<ParamAndGradBuffer> isp_shard_buffer(const ParamAndGradBuffer& model, int wp);

class IspGradSync : public GradSync {
 public:
  // `model_buffer` holds the full table with Storage::Provided; `shard_buffer`
  // is isp_shard_buffer of it, and `inner` syncs it over groups.wdp.
  IspGradSync(const WorkerConfig& cfg, std::shared_ptr<ParamAndGradBuffer> model_buffer,
              std::shared_ptr<ParamAndGradBuffer> shard_buffer, std::unique_ptr<GradSync> inner,
              IspGroups groups);

  const ParamAndGradBuffer& shard_buffer() const { return *shard_; }
  int64_t pool_bytes() const { return pool_->pool_bytes(); }

  void start() override;
  void prepare_step(double lr, double max_norm) override { inner_->prepare_step(lr, max_norm); }
  void begin_micro_batch(bool last) override;
  void on_grad_ready(int param) override { pool_->grad_ready(param); }
  double finish_micro_batch(double loss) override;
  double clip_and_step(double lr, double max_norm) override;
  void rebucket(double cap_mb, int64_t step) override { inner_->rebucket(cap_mb, step); }


 private:
  SyncReport make_report(bool describe) const override;
  int wp_size() const { return wp_ ? wp_->size() : 1; }

  std::shared_ptr<ParamAndGradBuffer> model_;
  std::vector<ParamInfo> full_;
  std::shared_ptr<ParamAndGradBuffer> shard_;
  comm::CommunicatorPtr sp_, wp_, wdp_;
  IspOptions o_;
  // Destroyed in reverse: the pool (whose collectives report to the inner
  // strategy) before the inner strategy.
  std::unique_ptr<GradSync> inner_;
  IspShardState shard_state_;  // its StrategyState
  UlyssesExchange exchange_;
  std::unique_ptr<IspWeightPool> pool_;
  bool last_micro_ = true;
  float loss_wire_ = 0;
  StepCommStats last_;  // the inner's accounting plus the pool's and the exchange's
};

}  // namespace weft
