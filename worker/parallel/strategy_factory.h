// The config's gradient sync strategy: what it is (StrategyTraits, derived
// once from the parallel section) and the GradSync that runs it.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "config/config.h"
#include "model/param_and_grad_buffer.h"
#include "parallel/grad_sync.h"

namespace weft {

// Properties of the configured strategy that the trainer, the worker and the
// metrics act on, so none of them compares strategy names.
struct StrategyTraits {
  bool shards_weights = false;     // a rank holds a shard of the weights (Storage::Provided)
  bool splits_sequence = false;    // sequences may be split over an sp group
  bool grid_groups = false;        // syncs over the rank grid's sp, wp and wdp groups
  bool weight_pool = false;        // holds gathered full weights (StateBytes::other["isp_pool"])
  int recompute_blocks = 0;        // blocks whose activations backward recomputes
  bool every_rank_writes = false;  // every rank writes its shard of a sharded checkpoint
};
StrategyTraits strategy_traits(const ParallelConfig& p);

// How the model's buffer holds its weights for this config's strategy.
Storage model_storage(const ParallelConfig& p);

// The groups of the rank grid a strategy may use (any may be null: size 1).
struct SyncGroups {
  comm::CommunicatorPtr dp, sp, wp, wdp;
};

// The strategy the config names, over `dp` (nullptr or size 1: alone), or for
// ISP over sp, wp and wdp. `buffer` must have model_storage(cfg.parallel).
// Throws ConfigError for a strategy this build cannot run.
std::unique_ptr<GradSync> make_grad_sync(const WorkerConfig& cfg,
                                         std::shared_ptr<ParamAndGradBuffer> buffer,
                                         comm::CommunicatorPtr dp);
std::unique_ptr<GradSync> make_grad_sync(const WorkerConfig& cfg,
                                         std::shared_ptr<ParamAndGradBuffer> buffer,
                                         const SyncGroups& groups);

// The strategy that syncs a buffer every rank of `group` holds whole: ZeRO
// (`sharded`, needs 2 ranks or more), else bucketed data parallelism, or one
// rank's when the group is null or of one rank. What make_grad_sync builds
// for dp and zero, and for ISP's weight shards over wdp (passed into
// IspGradSync: ISP never calls the factory back).
std::unique_ptr<GradSync> make_replica_sync(bool sharded, const ParallelConfig& p,
                                            const OptimConfig& optim,
                                            std::shared_ptr<ParamAndGradBuffer> buffer,
                                            comm::CommunicatorPtr group);

}  // namespace weft
