// weft-worker --export-hf: any checkpoint (replicated or sharded) as a
// Hugging Face model directory, tensor by tensor, written to OUT.tmp-PID and
// renamed to OUT at the end.
#include <unistd.h>

#include <memory>

#include <spdlog/spdlog.h>

#include "train/checkpoint_files.h"
#include "train/output_dirs.h"

namespace weft {

using namespace checkpoint_files;

std::string export_hf(const std::string& checkpoint, const std::string& out,
                      const std::atomic<int>* stop) {
  fs::path ckpt = checkpoint;
  if (!fs::exists(ckpt / "meta.json")) {
    const std::string latest = read_latest(ckpt.string());
    if (latest.empty())
      throw CheckpointError(
          checkpoint +
          ": not a checkpoint (no meta.json) nor a checkpoint directory (no 'latest')");
    ckpt /= latest;
  }
  // Checksumming a large checkpoint takes seconds: a stop is looked at
  // before every MiB of it, as before every tensor of the assembly.
  const nlohmann::json meta = verify(ckpt, [&] {
    if (stop && stop->load() != 0) throw StopRequested("stopped by a signal while verifying " + ckpt.string());
  });
  const std::string yaml = meta.value("config", "");
  if (yaml.empty())
    throw CheckpointError((ckpt / "meta.json").string() + ": no config to take the model from");
  const WorkerConfig saved = parse_config(yaml, (ckpt / "meta.json").string() + " config");
  const ModelConfig& cfg = saved.model;
  const std::vector<ParamInfo> table = llama_param_table(cfg);
  std::optional<HfWeights> hf;
  std::unique_ptr<WeightSource> src;
  if (meta.value("weights", "") == "sharded") {
    src = std::make_unique<ShardedCheckpointWeights>(
        ckpt, meta["world"].value("optimizer_shards", 1), table);
  } else {
    hf.emplace(HfWeights::open(ckpt.string()));
    check_hf_weights(*hf, table, cfg.tie_embeddings);
    src = std::make_unique<HfWeightSource>(*hf, table);
  }
  std::error_code ec;
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec)))
    throw CheckpointError(out + ": exists and is not an empty directory (nothing was written)");
  // OUT.tmp-PID, held while it is written: what a SIGKILLed export left
  // beside OUT (unheld) is removed first.
  fs::path out_path = out;
  if (out_path.filename().empty()) out_path = out_path.parent_path();  // "OUT/"
  const fs::path parent = out_path.parent_path().empty() ? fs::path(".") : out_path.parent_path();
  const std::string stem = out_path.filename().string() + ".tmp-";
  const StaleTemporaries stale = remove_abandoned_scratch(parent.string(), stem);
  if (stale.removed > 0)
    spdlog::info("removed {} leftovers of interrupted exports to {} ({:.1f} MiB)", stale.removed, out,
                 stale.bytes / 1048576.0);
  const fs::path tmp = out_path.string() + ".tmp-" + std::to_string(::getpid());
  try {
    const HeldScratch held(tmp.string());
    write_hf_model(
        tmp.string(), cfg, table, DType::F32,
        [&](int i, int64_t first, Tensor dst) {
          if (stop && stop->load() != 0)
            throw StopRequested("stopped by a signal while exporting " + ckpt.string());
          src->read(table[i].offset + first, dst);
        },
        static_cast<uint64_t>(saved.checkpoint.max_shard_mb * 1e6));
    fsync_path(tmp.string());
    fs::remove(out, ec);  // an empty directory
    fs::rename(tmp, out);
    fsync_path(fs::path(out).parent_path().empty() ? "." : fs::path(out).parent_path().string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return ckpt.string();
}

}  // namespace weft
