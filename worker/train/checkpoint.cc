// RunCheckpoints: a run's resume and saves (replicated, sharded, in the
// background), on the format of checkpoint_dir.cc and checkpoint_shards.cc.
#include "train/checkpoint.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>

#include "train/checkpoint_files.h"

namespace weft {

using namespace checkpoint_files;

namespace {

std::vector<SafetensorsWriter::Piece> host_pieces(const Tensor& t) {
  WEFT_CHECK(t.device == Device::CPU && t.dtype == DType::F32,
             "a shard's weights are f32 host memory");
  return {{t.data, t.nbytes()}};
}

}  // namespace

RunCheckpoints::RunCheckpoints(const WorkerConfig& cfg, std::string dir, StrategyState& state,
                               Llama& model, bool via_full, int rank, int world,
                               comm::Communicator* group)
    : cfg_(cfg),
      dir_(std::move(dir)),
      state_(state),
      model_(model),
      via_full_(via_full),
      rank_(rank),
      world_(world),
      group_(group) {}

OptimizerShard RunCheckpoints::shard() const {
  // Replicated state: every rank loads rank 0's file; sharded: its own.
  if (state_.optimizer_shards() > 1)
    return OptimizerShard{group_->rank(), state_.optimizer_shards(), world_,
                          state_.optimizer_layout()};
  return OptimizerShard{0, 1, world_, {}};
}

void load_weights_into(const WeightSource& src, StrategyState& state, Llama& model, bool via_full) {
  if (!via_full) return src.read_params_into(model.buffer());
  if (state.load_weights(src)) return;  // just this rank's part
  Llama full(model.config());
  src.read_params_into(full.buffer());
  state.load_full_weights(full.buffer());
}

std::optional<CheckpointMeta> RunCheckpoints::resume() {
  // The weights straight into the model, or through the strategy (its own
  // part, or from a host f32 full model); the optimizer state into the
  // strategy's optimizer itself when it lives on the host, else a host copy
  // loaded back after; for sharded weights the ranges in the full model's
  // layout, of which this rank keeps its part.
  std::optional<AdamW> staged;
  OptimizerShard where = shard();
  if (state_.shards_weights()) {
    staged.emplace(state_.export_optimizer());
    where = OptimizerShard{rank_, world_, world_, optimizer_layout(rank_, world_, *staged)};
  } else if (state_.optimizer().device() != Device::CPU) {
    staged.emplace(state_.optimizer().copy_to(Device::CPU));
  }
  auto meta = load_latest_checkpoint(
      dir_, cfg_.model, staged ? *staged : state_.optimizer(), where,
      [&](const WeightSource& src) { load_weights_into(src, state_, model_, via_full_); });
  if (!meta) return std::nullopt;
  if (state_.shards_weights())
    state_.import_optimizer(*staged);
  else if (staged)
    state_.optimizer().load_state(*staged);
  return meta;
}

RunCheckpoints::~RunCheckpoints() {
  if (writer_.joinable()) writer_.join();
}

std::optional<RunCheckpoints::Saved> RunCheckpoints::complete() {
  if (!pending_) return std::nullopt;
  const auto t0 = std::chrono::steady_clock::now();
  writer_.join();
  const std::unique_ptr<ShardedWrite> write = std::move(pending_);
  pending_part_.reset();
  Saved saved;
  saved.step = write->step();
  saved.path = write->finish(/*export_hf=*/false);
  saved.seconds = pending_blocked_s_ +
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return saved;
}

bool RunCheckpoints::async() const {
  switch (cfg_.checkpoint.async) {
    case CheckpointAsync::On: return true;
    case CheckpointAsync::Off: return false;
    case CheckpointAsync::Auto: break;
  }
  throw ConfigError("checkpoint.async: auto was not resolved (resolve() makes it true or false from the device)");
}

bool RunCheckpoints::sharded() const {
  return group_ && world_ > 1 && (state_.shards_weights() || state_.optimizer_shards() > 1);
}

std::optional<RunCheckpoints::Saved> RunCheckpoints::save(int64_t steps_completed, double last_loss,
                                                          CheckpointKind kind) {
  const bool final = kind == CheckpointKind::Final;
  state_.flush();  // overlapped parameter gathers land before the weights are written
  CheckpointMeta meta;
  meta.step = steps_completed;
  meta.last_loss = last_loss;
  meta.world_size = world_;
  meta.config_yaml = to_yaml(cfg_);
  meta.max_shard_bytes = static_cast<uint64_t>(cfg_.checkpoint.max_shard_mb * 1e6);
  const int keep = cfg_.checkpoint.keep;
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  Saved saved;
  saved.step = steps_completed;
  if (sharded()) {
    // Each rank writes what it owns, weights and optimizer state, in the
    // full model's layout; nobody gathers the model. The last checkpoint of
    // a run also gets the HF model files, streamed from those.
    WEFT_CHECK(!pending_,
               "save: the previous checkpoint is still being written (complete() first)");
    const bool background = kind == CheckpointKind::Periodic && async();
    auto write_now = [&](ShardedWrite& w, const AdamW& opt,
                         const std::vector<SafetensorsWriter::Piece>& weights) {
      w.write(opt, weights);
      saved.path = w.finish(/*export_hf=*/final);
      saved.seconds = seconds();
      return saved;
    };
    if (!background && !state_.shards_weights() && state_.optimizer().device() == Device::CPU) {
      // ZeRO on the host: its live moments, already in the model's layout,
      // and the weights of its ranges, the master copy or (f32 working
      // weights) the parameters' own ranges: nothing is copied.
      const AdamW& opt = state_.optimizer();
      std::vector<SafetensorsWriter::Piece> weights;
      if (opt.has_master()) {
        weights = host_pieces(opt.master());
      } else {
        const float* params = model_.flat_params().f32();
        for (const ParamRange& r : opt.ranges())
          weights.push_back({params + r.offset, static_cast<size_t>(r.numel) * sizeof(float)});
      }
      ShardedWrite w(dir_, cfg_.model, meta, keep, shard(), *group_, model_.buffer().device());
      w.begin();
      return write_now(w, opt, weights);
    }
    auto part = std::make_unique<AdamW>(state_.export_shard());  // a host snapshot
    const OptimizerShard where =
        state_.shards_weights()
            ? OptimizerShard{rank_, world_, world_, optimizer_layout(rank_, world_, *part)}
            : shard();
    auto write =
        std::make_unique<ShardedWrite>(dir_, cfg_.model, meta, keep, where, *group_, model_.buffer().device());
    write->begin();
    if (!background) return write_now(*write, *part, host_pieces(part->master()));
    pending_ = std::move(write);
    pending_part_ = std::move(part);
    writer_ = std::thread(
        [this] { pending_->write(*pending_part_, host_pieces(pending_part_->master())); });
    pending_blocked_s_ = seconds();
    return std::nullopt;
  }
  // Replicated: the model itself, or a full host f32 copy gathered from the
  // strategy where the working weights are not f32 host memory.
  if (!state_.writes_optimizer_state()) return std::nullopt;  // one rank writes
  std::unique_ptr<Llama> full;
  if (via_full_) {
    full = std::make_unique<Llama>(cfg_.model);
    state_.gather_full_weights(full->buffer());
  }
  const Llama& weights = full ? *full : model_;
  std::optional<AdamW> host_opt;  // device optimizer state goes through the host
  if (state_.optimizer().device() != Device::CPU)
    host_opt.emplace(state_.optimizer().copy_to(Device::CPU));
  const AdamW& opt = host_opt ? *host_opt : state_.optimizer();
  saved.path = save_checkpoint(dir_, weights, opt, meta, keep, 0);
  saved.seconds = seconds();
  return saved;
}

}  // namespace weft
