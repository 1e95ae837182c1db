#include "parallel/strategy_factory.h"

#include <string>

#include "parallel/data_parallel.h"
#include "parallel/isp.h"
#include "parallel/local_sync.h"
#include "parallel/zero.h"

namespace weft {

StrategyTraits strategy_traits(const ParallelConfig& p) {
  StrategyTraits t;
  if (p.strategy == Strategy::Isp) {
    t.shards_weights = true;
    t.splits_sequence = true;
    t.grid_groups = true;
    t.weight_pool = true;
    t.recompute_blocks = p.isp.recompute_blocks;
  }
  t.every_rank_writes =
      p.strategy == Strategy::Zero || p.strategy == Strategy::Isp;  // sharded checkpoints
  return t;
}

Storage model_storage(const ParallelConfig& p) {
  return strategy_traits(p).shards_weights ? Storage::Provided : Storage::Owned;
}

std::unique_ptr<GradSync> make_grad_sync(const WorkerConfig& cfg,
                                         std::shared_ptr<ParamAndGradBuffer> buffer,
                                         comm::CommunicatorPtr dp) {
  return make_grad_sync(cfg, std::move(buffer),
                        SyncGroups{std::move(dp), nullptr, nullptr, nullptr});
}

std::unique_ptr<GradSync> make_grad_sync(const WorkerConfig& cfg,
                                         std::shared_ptr<ParamAndGradBuffer> buffer,
                                         const SyncGroups& groups) {
  const ParallelConfig& p = cfg.parallel;
  comm::CommunicatorPtr dp = groups.dp;
  auto size = [](const comm::CommunicatorPtr& c) { return c ? c->size() : 1; };
  if (p.strategy == Strategy::Isp) {
    if (size(groups.sp) != p.sp || size(groups.wp) != p.wp)
      throw ConfigError("parallel.strategy: 'isp' with sp " + std::to_string(p.sp) + ", wp " +
                        std::to_string(p.wp) + " needs sp and wp groups of those sizes (got " +
                        std::to_string(size(groups.sp)) + " and " +
                        std::to_string(size(groups.wp)) + ")");
    // The inner strategy reduces the weight shards over wdp, as plain DP or
    // ZeRO reduce whole models over dp.
    const bool zero = p.isp.wdp_strategy == WdpStrategy::Zero;
    if (zero && size(groups.wdp) < 2)
      throw ConfigError("parallel.isp.wdp_strategy: 'zero' shards the optimizer state over the " +
                        std::to_string(size(groups.wdp)) +
                        " rank(s) holding the same weight shard (world / wp); it needs at least 2");
    std::shared_ptr<ParamAndGradBuffer> shard = isp_shard_buffer(*buffer, p.wp);
    std::unique_ptr<GradSync> inner = make_replica_sync(zero, p, cfg.optim, shard, groups.wdp);
    return std::make_unique<IspGradSync>(cfg, std::move(buffer), std::move(shard), std::move(inner),
                                         IspGroups{groups.sp, groups.wp, groups.wdp});
  }
  if (p.sp != 1 || p.wp != 1)
    throw ConfigError("parallel.strategy: '" + std::string(contract::mode_name(p.strategy)) +
                      "' with sp " + std::to_string(p.sp) + ", wp " + std::to_string(p.wp) +
                      " needs strategy isp");
  const int world = dp ? dp->size() : 1;
  if (p.strategy == Strategy::Zero) {
    if (world < 2)
      throw ConfigError(
          "parallel.strategy: 'zero' shards the optimizer state over the data-parallel "
          "ranks and needs at least 2 (world size is " +
          std::to_string(world) + "); use strategy dp to train on one rank");
  }
  return make_replica_sync(p.strategy == Strategy::Zero, p, cfg.optim, std::move(buffer),
                           std::move(dp));
}

std::unique_ptr<GradSync> make_replica_sync(bool sharded, const ParallelConfig& p,
                                            const OptimConfig& optim,
                                            std::shared_ptr<ParamAndGradBuffer> buffer,
                                            comm::CommunicatorPtr group) {
  const int ranks = group ? group->size() : 1;
  if (sharded) {
    WEFT_CHECK(ranks >= 2, "ZeRO needs a group of 2 ranks or more");
    return std::make_unique<ZeroGradSync>(std::move(buffer), std::move(group), zero_options(p),
                                          optim);
  }
  if (ranks == 1) return std::make_unique<LocalGradSync>(std::move(buffer), optim);
  return std::make_unique<DataParallel>(std::move(buffer), std::move(group),
                                        data_parallel_options(p), optim);
}

}  // namespace weft
