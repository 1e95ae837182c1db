// Resume: the newest intact checkpoint of a directory (`latest` first),
// checked in full before anything is read, into the model and the optimizer,
// re-sharding the optimizer state when the layout changed.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>

#include "train/checkpoint_files.h"

namespace weft {

using namespace checkpoint_files;

std::vector<std::string> model_shape_differences(const ModelConfig& saved, const ModelConfig& now) {
  std::vector<std::string> out;
  auto cmp = [&](const char* field, auto a, auto b) {
    if (a != b) out.push_back(fmt::format("model.{}: checkpoint {}, config {}", field, a, b));
  };
  cmp("vocab_size", saved.vocab_size, now.vocab_size);
  cmp("d_model", saved.d_model, now.d_model);
  cmp("n_layers", saved.n_layers, now.n_layers);
  cmp("n_heads", saved.n_heads, now.n_heads);
  cmp("n_kv_heads", saved.n_kv_heads, now.n_kv_heads);
  cmp("head_dim (effective)", saved.head_dim(), now.head_dim());
  cmp("ffn_hidden (effective)", saved.ffn(), now.ffn());
  cmp("tie_embeddings", saved.tie_embeddings, now.tie_embeddings);
  return out;
}

std::optional<CheckpointMeta> load_latest_checkpoint(const std::string& dir, Llama& model,
                                                     AdamW& opt, int rank) {
  return load_latest_checkpoint(dir, model, opt, OptimizerShard{rank, 1, 1, {}});
}

std::optional<CheckpointMeta> load_latest_checkpoint(const std::string& dir, Llama& model,
                                                     AdamW& opt, const OptimizerShard& shard) {
  return load_latest_checkpoint(dir, model.config(), opt, shard, [&](const WeightSource& src) {
    src.read_params_into(model.buffer());
  });
}

std::optional<CheckpointMeta> load_latest_checkpoint(
    const std::string& dir, const ModelConfig& cfg, AdamW& opt, const OptimizerShard& shard,
    const std::function<void(const WeightSource&)>& load_weights) {
  const int rank = shard.rank;
  const std::vector<ParamInfo> table = llama_param_table(cfg);
  std::vector<std::string> candidates = list_checkpoints(dir);
  // `latest` first: it names what the writer finished last. One that cannot
  // be read leaves the newest intact step first.
  std::string latest;
  try {
    latest = read_latest(dir);
  } catch (const CheckpointError& e) {
    spdlog::warn("{}; taking the newest intact checkpoint instead", e.what());
  }
  if (!latest.empty()) {
    fs::path p = fs::path(dir) / latest;
    auto it = std::find(candidates.begin(), candidates.end(), p.string());
    if (it != candidates.end()) std::rotate(candidates.begin(), it, it + 1);
  }
  if (candidates.empty()) return std::nullopt;

  std::vector<std::string> problems;
  for (const std::string& c : candidates) {
    try {
      nlohmann::json meta = verify(c);
      // A changed model config is the user's mistake, not a damaged
      // checkpoint: name the fields instead of failing on a tensor size.
      if (meta.contains("config") && meta["config"].is_string() &&
          !meta["config"].get<std::string>().empty()) {
        WorkerConfig saved;
        try {
          saved = parse_config(meta["config"].get<std::string>(), c + "/meta.json config");
        } catch (const ConfigError&) {
          saved.model = cfg;  // written by another version: let the tensors decide
        }
        const auto diff = model_shape_differences(saved.model, cfg);
        if (!diff.empty()) {
          std::string all;
          for (const std::string& d : diff) all += (all.empty() ? "" : "; ") + d;
          throw ConfigError(
              "the model config differs from the checkpoint in " + c + ": " + all +
              " (resume with the checkpoint's model settings, or use a new checkpoint.dir)");
        }
      }
      const int saved_shards = meta["world"].value("optimizer_shards", 1);
      const int saved_world = meta["world"].value("size", 1);
      const std::string optim_file = optim_file_name(rank);
      // Weights as one file or HF shards, or in the rank files of a sharded
      // checkpoint; checked in full before anything is read into the model,
      // like the optimizer state below.
      std::optional<HfWeights> hf;
      std::unique_ptr<WeightSource> weights;
      if (meta.value("weights", "") == "sharded") {
        weights = std::make_unique<ShardedCheckpointWeights>(fs::path(c), saved_shards, table);
      } else {
        hf.emplace(HfWeights::open(c));
        check_hf_weights(*hf, table, cfg.tie_embeddings);
        weights = std::make_unique<HfWeightSource>(*hf, table);
      }
      // The same shards as saved: this rank's own file. Otherwise (another
      // world size, DP <-> ZeRO, or the bucket layout changed, e.g. by the
      // tuner) re-shard: gather this rank's ranges from every saved file.
      const std::string own = (fs::path(c) / optim_file).string();
      std::optional<SafetensorsIndex> same;
      if (saved_shards == shard.shards && fs::exists(own)) {
        SafetensorsIndex of = SafetensorsIndex::open(own);
        auto lay = of.metadata().find("layout");
        const std::string saved_layout = lay == of.metadata().end() ? "" : lay->second;
        if (shard.shards == 1 || saved_layout == shard.layout) same.emplace(std::move(of));
      }
      int64_t step_count = 0;
      if (same) {
        const int64_t n = opt.exp_avg().numel();
        require_f32(*same, "exp_avg", n);
        require_f32(*same, "exp_avg_sq", n);
        auto sc = same->metadata().find("step_count");
        if (sc == same->metadata().end()) throw CheckpointError(same->path() + ": no step_count");
        step_count = std::stoll(sc->second);
        load_weights(*weights);
        same->read_raw("exp_avg", 0, n, opt.exp_avg().data);
        same->read_raw("exp_avg_sq", 0, n, opt.exp_avg_sq().data);
      } else {
        step_count = reshard_optimizer(c, saved_shards, table, opt);
        load_weights(*weights);
        spdlog::info(
            "optimizer state re-sharded from {} (world size {}, {} shard{}) to world size {}, {} "
            "shard{}",
            c, saved_world, saved_shards, saved_shards == 1 ? "" : "s", shard.world, shard.shards,
            shard.shards == 1 ? "" : "s");
      }
      opt.set_step_count(step_count);

      CheckpointMeta out;
      out.step = meta["step"].get<int64_t>();
      out.last_loss = meta.value("last_loss", 0.0);
      out.world_size = meta["world"].value("size", 1);
      out.config_yaml = meta.value("config", "");
      out.identity = meta_digest(meta);
      if (!problems.empty()) spdlog::warn("resuming from the older checkpoint {} instead", c);
      return out;
    } catch (const CheckpointError& e) {
      spdlog::warn("checkpoint {} is unusable: {}", c, e.what());
      problems.push_back(e.what());
    } catch (const nlohmann::json::exception& e) {
      spdlog::warn("checkpoint {} has a malformed meta.json: {}", c, e.what());
      problems.push_back(c + ": malformed meta.json");
    }
  }
  std::string all;
  for (const std::string& p : problems) all += "\n  " + p;
  throw CheckpointError("no valid checkpoint in " + dir +
                        " (remove the directory to start over):" + all);
}

}  // namespace weft
