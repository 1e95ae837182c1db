// The rank files of a checkpoint (optim-rank-R.safetensors): written
// (save_checkpoint for replicated state, ShardedWrite for sharded ZeRO and
// ISP state with each rank's weights), read as a sharded model
// (ShardedCheckpointWeights), and re-sharded onto another layout
// (reshard_optimizer).
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "parallel/host_scalars.h"
#include "train/checkpoint_files.h"

namespace weft {

namespace checkpoint_files {

std::string optim_file_name(int rank) {
  return "optim-rank-" + std::to_string(rank) + ".safetensors";
}

uint32_t write_optimizer(const fs::path& path, const AdamW& opt, const OptimizerShard& shard,
                         const std::vector<SafetensorsWriter::Piece>* weights) {
  SafetensorsWriter o;
  o.set_metadata("step_count", std::to_string(opt.step_count()));
  if (shard.shards > 1) {
    o.set_metadata("shard", std::to_string(shard.rank) + "/" + std::to_string(shard.shards));
    o.set_metadata("layout", shard.layout);
  }
  o.add("exp_avg", opt.exp_avg());
  o.add("exp_avg_sq", opt.exp_avg_sq());
  if (weights) o.add_pieces(kShardWeights, DType::F32, {opt.state_numel()}, *weights);
  return o.write(path.string());
}

std::vector<ParamRange> saved_ranges(const std::map<std::string, std::string>& metadata,
                                     const std::string& path, const std::vector<ParamInfo>& table) {
  std::vector<ParamRange> out;
  auto lay = metadata.find("layout");
  if (lay == metadata.end()) {
    for (const ParamInfo& p : table) out.push_back({p.offset, p.numel, true});
    return out;
  }
  const std::string& text = lay->second;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) throw CheckpointError(path + ": malformed layout '" + text + "'");
  std::istringstream in(text.substr(colon + 1));
  std::string tok;
  while (in >> tok) {
    const size_t plus = tok.find('+');
    if (plus == std::string::npos)
      throw CheckpointError(path + ": malformed layout entry '" + tok + "'");
    out.push_back({std::stoll(tok.substr(0, plus)), std::stoll(tok.substr(plus + 1)), true});
  }
  return out;
}

ShardedCheckpointWeights::ShardedCheckpointWeights(const fs::path& ckpt, int shards,
                                                   const std::vector<ParamInfo>& table) {
  for (int r = 0; r < shards; ++r) {
    const std::string path = (ckpt / optim_file_name(r)).string();
    files_.push_back(SafetensorsIndex::open(path));
    const SafetensorsIndex& f = files_.back();
    if (!f.has(kShardWeights) || f.at(kShardWeights).dtype != "F32")
      throw CheckpointError(path + ": no f32 '" + std::string(kShardWeights) +
                            "' tensor (a sharded checkpoint's rank file holds its weights)");
    int64_t pos = 0;
    for (const ParamRange& r2 : saved_ranges(f.metadata(), path, table)) {
      pieces_.push_back({r2.offset, r2.numel, static_cast<int>(files_.size() - 1), pos});
      pos += r2.numel;
    }
    if (pos != f.at(kShardWeights).numel)
      throw CheckpointError(path + ": '" + std::string(kShardWeights) + "' holds " +
                            std::to_string(f.at(kShardWeights).numel) + " elements, its layout " +
                            std::to_string(pos));
  }
  std::sort(pieces_.begin(), pieces_.end(),
            [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
  int64_t end = 0;
  for (const Piece& p : pieces_) {
    if (p.offset != end)
      throw CheckpointError(ckpt.string() + ": the rank files' weights " +
                            (p.offset < end ? "overlap" : "leave a gap") + " at element " +
                            std::to_string(std::min(p.offset, end)));
    end = p.offset + p.numel;
  }
  int64_t numel = 0;
  for (const ParamInfo& p : table) numel += p.numel;
  if (end != numel)
    throw CheckpointError(ckpt.string() + ": the rank files' weights cover " + std::to_string(end) +
                          " of the model's " + std::to_string(numel) + " elements");
}

void ShardedCheckpointWeights::read(int64_t offset, Tensor dst) const {
  const int64_t n = dst.numel();
  float* out = dst.f32();
  auto it = std::upper_bound(pieces_.begin(), pieces_.end(), offset,
                             [](int64_t o, const Piece& p) { return o < p.offset; });
  if (it != pieces_.begin()) --it;
  for (; it != pieces_.end() && it->offset < offset + n; ++it) {
    const int64_t b = std::max(offset, it->offset),
                  e = std::min(offset + n, it->offset + it->numel);
    if (b < e)
      files_[it->file].read_raw(kShardWeights, it->pos + (b - it->offset), e - b,
                                out + (b - offset));
  }
}

void require_f32(const SafetensorsIndex& f, const std::string& name, int64_t n) {
  const SafetensorsIndex::Entry& e = f.at(name);
  if (e.dtype != "F32" || e.numel != n)
    throw CheckpointError(f.path() + ": tensor '" + name + "' is " + e.dtype + " of " +
                          std::to_string(e.numel) + " elements, expected F32 of " +
                          std::to_string(n));
}

}  // namespace checkpoint_files

using namespace checkpoint_files;

namespace {

void add_model(SafetensorsWriter& w, const Llama& model) {
  for (size_t i = 0; i < model.params().size(); ++i)
    w.add(model.params()[i].name, model.param(static_cast<int>(i)));
}

}  // namespace

void save_model_weights(const std::string& path, const Llama& model) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  add_model(w, model);
  w.write(path);
}

std::string save_checkpoint(const std::string& dir, const Llama& model, const AdamW& opt,
                            const CheckpointMeta& meta, int keep, int rank) {
  try {
    fs::create_directories(dir);
    const std::string name = "step-" + std::to_string(meta.step);
    const fs::path tmp = fs::path(dir) / (".tmp-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(tmp);
    fs::create_directories(tmp);

    nlohmann::json files = nlohmann::json::object();
    auto record = [&](const std::string& file, uint32_t crc) {
      files[file] = {{"bytes", fs::file_size(tmp / file)}, {"crc32", crc}};
    };
    if (rank == 0)
      for (const WrittenFile& f : write_hf_model(tmp.string(), model, meta.max_shard_bytes))
        record(f.name, f.crc32);
    const std::string optim_file = optim_file_name(rank);
    record(optim_file, write_optimizer(tmp / optim_file, opt, {}));
    return publish(dir, tmp, model.num_params(), meta, 1, files, keep);
  } catch (const fs::filesystem_error& e) {
    throw CheckpointError(std::string("checkpoint write failed: ") + e.what());
  }
}

ShardedWrite::ShardedWrite(std::string dir, const ModelConfig& cfg, const CheckpointMeta& meta,
                           int keep, const OptimizerShard& shard, comm::Communicator& group, Device device)
    : dir_(std::move(dir)),
      cfg_(cfg),
      meta_(meta),
      keep_(keep),
      shard_(shard),
      group_(group),
      device_(device),
      name_("step-" + std::to_string(meta.step)),
      // One name every rank computes (a pid would differ per rank).
      tmp_((fs::path(dir_) / (".tmp-" + name_ + "-shards")).string()) {}

void ShardedWrite::attempt(const std::function<void()>& fn) {
  // A rank whose write fails still joins the barriers (or its peers would
  // wait for the deadline) and throws after the last one.
  if (!error_.empty()) return;
  try {
    fn();
  } catch (const fs::filesystem_error& e) {
    error_ = std::string("checkpoint write failed: ") + e.what();
  } catch (const CheckpointError& e) {
    error_ = e.what();
  } catch (const std::exception& e) {  // e.g. out of memory in a writer thread
    error_ = std::string("checkpoint write failed: ") + e.what();
  }
}

void ShardedWrite::begin() {
  attempt([&] {
    if (group_.rank() != 0) return;
    fs::create_directories(dir_);
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
  });
  group_.barrier("checkpoint " + name_ + " directory")->wait();
}

void ShardedWrite::write(const AdamW& opt, const std::vector<SafetensorsWriter::Piece>& weights) {
  // Every rank writes into the directory rank 0 made: checkpoint.dir must be
  // one filesystem for all ranks (a shared volume). A rank that cannot see it
  // is a deployment mistake, not a transient I/O error: exit 1, no restarts.
  attempt([&] {
    if (group_.rank() != 0 && error_.empty() && !fs::is_directory(tmp_)) {
      not_shared_ = true;
      error_ = "checkpoint.dir " + dir_ + " is not shared by all ranks: rank " +
               std::to_string(group_.rank()) + " cannot see " + tmp_ +
               ", which rank 0 created. Sharded checkpoints (ZeRO, ISP) need one "
               "directory every rank writes its shard into (a ReadWriteMany volume, or hostPath on "
               "one node)";
      return;
    }
    write_optimizer(fs::path(tmp_) / optim_file_name(shard_.rank), opt, shard_, &weights);
  });
}

std::string ShardedWrite::finish(bool export_hf) {
  const fs::path tmp = tmp_;
  std::string result = (fs::path(dir_) / name_).string();
  group_.barrier("checkpoint " + name_ + " shards")->wait();
  // Rank 0 learns of it here too, rather than from a missing file.
  {
    float flag = not_shared_ ? 1.0f : 0.0f;
    all_reduce_host(group_, device_, &flag, 1, comm::ReduceOp::Sum, "checkpoint directory shared")->wait();
    if (flag > 0 && error_.empty())
      error_ = "checkpoint.dir " + dir_ + " is not shared by all ranks (another rank cannot see " +
               tmp_ +
               "); sharded checkpoints (ZeRO, ISP) need one directory every rank writes into";
    not_shared_ = not_shared_ || flag > 0;
  }
  attempt([&] {
    if (group_.rank() != 0) return;
    const std::vector<ParamInfo> table = llama_param_table(cfg_);
    int64_t num_params = 0;
    for (const ParamInfo& p : table) num_params += p.numel;
    nlohmann::json files = nlohmann::json::object();
    auto record = [&](const std::string& file) {
      const fs::path p = tmp / file;
      files[file] = {{"bytes", fs::file_size(p)}, {"crc32", crc32_of_file(p.string())}};
    };
    std::vector<WrittenFile> model_files;
    if (export_hf) {
      // The HF model files, one tensor at a time from the rank files just
      // written: the full model is never in memory, and the checkpoint is
      // still a directory from_pretrained loads.
      const ShardedCheckpointWeights src(tmp, shard_.shards, table);
      model_files = write_hf_model(
          tmp_, cfg_, table, DType::F32,
          [&](int i, int64_t first, Tensor dst) { src.read(table[i].offset + first, dst); },
          meta_.max_shard_bytes);
    }
    for (const WrittenFile& f : model_files)
      files[f.name] = {{"bytes", fs::file_size(tmp / f.name)}, {"crc32", f.crc32}};
    for (int r = 0; r < shard_.shards; ++r) record(optim_file_name(r));
    result = publish(dir_, tmp, num_params, meta_, shard_.shards, files, keep_,
                     /*sharded_weights=*/true);
  });
  group_.barrier("checkpoint " + name_ + " published")->wait();
  if (not_shared_) throw ConfigError(error_);
  if (!error_.empty()) throw CheckpointError(error_);
  return result;
}

int64_t reshard_optimizer(const std::string& ckpt, int saved_shards,
                          const std::vector<ParamInfo>& table, AdamW& opt) {
  // This rank's ranges and where each starts in its compact state.
  const std::vector<ParamRange>& mine = opt.ranges();
  std::vector<int64_t> mine_pos;
  int64_t total = 0;
  for (const ParamRange& r : mine) mine_pos.push_back(total), total += r.numel;
  float* m_out = static_cast<float*>(opt.exp_avg().data);
  float* v_out = static_cast<float*>(opt.exp_avg_sq().data);
  int64_t copied = 0, step_count = -1;
  for (int r = 0; r < saved_shards; ++r) {
    const std::string path = (fs::path(ckpt) / optim_file_name(r)).string();
    if (!fs::exists(path))
      throw CheckpointError(path +
                            ": missing (re-sharding reads every rank's optimizer file; "
                            "the checkpoint directory must be shared by all ranks)");
    // Headers only: just the overlapping element ranges are read, so a rank
    // never holds another rank's whole file (weights included).
    const SafetensorsIndex f = SafetensorsIndex::open(path);
    auto sc = f.metadata().find("step_count");
    if (sc == f.metadata().end()) throw CheckpointError(path + ": no step_count");
    const int64_t this_count = std::stoll(sc->second);
    if (step_count >= 0 && this_count != step_count)
      throw CheckpointError(path + ": step_count " + std::to_string(this_count) +
                            ", other shards " + std::to_string(step_count));
    step_count = this_count;
    const std::vector<ParamRange> theirs = saved_ranges(f.metadata(), path, table);
    int64_t n = 0;
    for (const ParamRange& t : theirs) n += t.numel;
    require_f32(f, "exp_avg", n);
    require_f32(f, "exp_avg_sq", n);
    int64_t pos = 0;
    for (const ParamRange& t : theirs) {
      for (size_t i = 0; i < mine.size(); ++i) {
        const int64_t b = std::max(t.offset, mine[i].offset);
        const int64_t e = std::min(t.offset + t.numel, mine[i].offset + mine[i].numel);
        if (b >= e) continue;
        const int64_t src = pos + (b - t.offset), dst = mine_pos[i] + (b - mine[i].offset);
        f.read_raw("exp_avg", src, e - b, m_out + dst);
        f.read_raw("exp_avg_sq", src, e - b, v_out + dst);
        copied += e - b;
      }
      pos += t.numel;
    }
  }
  // Saved shards partition the parameters, so every element is found once.
  if (copied != total)
    throw CheckpointError(ckpt + ": the saved optimizer shards cover " + std::to_string(copied) +
                          " of this rank's " + std::to_string(total) + " optimizer elements");
  return step_count;
}

}  // namespace weft
