#include "train/checkpoint.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "small_file.h"

namespace weft {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "weft-checkpoint-1";

int64_t step_of(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5) return -1;
  for (size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return -1;
  return std::stoll(name.substr(5));
}

void write_text_atomically(const fs::path& path, const std::string& text) {
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw CheckpointError(tmp.string() + ": write failed");
  }
  fsync_path(tmp.string());
  fs::rename(tmp, path);
}

void add_model(SafetensorsWriter& w, const Llama& model) {
  for (size_t i = 0; i < model.params().size(); ++i)
    w.add(model.params()[i].name, model.param(static_cast<int>(i)));
}

// meta.json's own checksum: over its canonical text without the checksum
// field (nlohmann's objects are ordered, and doubles print to round-trip, so
// a parsed meta prints as it was written). A hand-edited step or next_step
// no longer passes as the writer's.
constexpr const char* kMetaChecksum = "meta_crc32";

uint32_t meta_digest(nlohmann::json meta) {
  meta.erase(kMetaChecksum);
  const std::string text = meta.dump();
  return static_cast<uint32_t>(::crc32(0L, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())));
}

// The checkpoint `latest` names in `dir`; empty when there is no `latest`.
// A `latest` that is not a small regular file is refused (a FIFO would block).
std::string read_latest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "latest").string();
  const SmallFile f = read_small_file(path, kMaxLineFileBytes);
  if (f.status == SmallFile::Status::Missing) return "";
  if (!f.ok()) throw CheckpointError(f.problem);
  std::istringstream in(f.text);
  std::string name;
  in >> name;
  return name;
}

struct FileRecord {
  uint64_t bytes;
  uint32_t crc;
};

// Checks meta.json's records against the files; returns the parsed meta.
nlohmann::json verify(const fs::path& ckpt) {
  fs::path meta_path = ckpt / "meta.json";
  const SmallFile f = read_small_file(meta_path.string(), kMaxTextFileBytes);
  if (f.status == SmallFile::Status::Missing) throw CheckpointError(meta_path.string() + ": missing");
  if (!f.ok()) throw CheckpointError(f.problem);
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(f.text);
  } catch (const std::exception& e) {
    throw CheckpointError(meta_path.string() + ": not valid JSON (" + e.what() + ")");
  }
  if (meta.value("format", "") != kFormat)
    throw CheckpointError(meta_path.string() + ": unknown format " + meta.value("format", "''"));
  if (!meta.contains("files") || !meta["files"].is_object())
    throw CheckpointError(meta_path.string() + ": no file records");
  // Every meta.json of this format carries its own checksum: one without it
  // was edited (deleting the field would otherwise let an edited step pass).
  if (!meta.contains(kMetaChecksum))
    throw CheckpointError(meta_path.string() + ": no " + kMetaChecksum +
                          " (every checkpoint weft writes has one: this meta.json was edited)");
  if (!meta[kMetaChecksum].is_number_unsigned() || meta[kMetaChecksum].get<uint32_t>() != meta_digest(meta))
    throw CheckpointError(meta_path.string() + ": edited after it was written (its " + kMetaChecksum +
                          " does not match its contents)");
  // The directory's name is what `latest` and the pruning go by: a step that
  // disagrees with it would resume one checkpoint's state as another's step.
  const fs::path dir_name = ckpt.has_filename() ? ckpt.filename() : ckpt.parent_path().filename();
  const int64_t dir_step = step_of(dir_name.string());
  if (dir_step >= 0 && (!meta.contains("step") || !meta["step"].is_number_integer() ||
                        meta["step"].get<int64_t>() != dir_step))
    throw CheckpointError(meta_path.string() + ": step " + (meta.contains("step") ? meta["step"].dump() : "missing") +
                          ", but the directory is " + dir_name.string());
  for (auto it = meta["files"].begin(); it != meta["files"].end(); ++it) {
    fs::path file = ckpt / it.key();
    std::error_code ec;
    uint64_t size = fs::file_size(file, ec);
    if (ec) throw CheckpointError(file.string() + ": missing");
    uint64_t want = (*it)["bytes"].get<uint64_t>();
    if (size != want)
      throw CheckpointError(file.string() + ": truncated or altered (" + std::to_string(size) +
                            " bytes, meta.json says " + std::to_string(want) + ")");
    uint32_t crc = crc32_of_file(file.string());
    if (crc != (*it)["crc32"].get<uint32_t>())
      throw CheckpointError(file.string() + ": checksum mismatch (corrupt)");
  }
  return meta;
}

}  // namespace

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    int64_t s = step_of(e.path().filename().string());
    if (s >= 0 && e.is_directory()) found.emplace_back(s, e.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

int64_t newest_checkpoint_step(const std::string& dir) {
  const std::vector<std::string> all = list_checkpoints(dir);
  return all.empty() ? 0 : std::max<int64_t>(0, step_of(fs::path(all.front()).filename().string()));
}

void save_model_weights(const std::string& path, const Llama& model) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  add_model(w, model);
  w.write(path);
}

namespace {

std::string optim_file_name(int rank) { return "optim-rank-" + std::to_string(rank) + ".safetensors"; }

// The tensor of a sharded checkpoint's rank file that holds the rank's
// weights (f32, the ranges of its "layout").
constexpr const char* kShardWeights = "weights";

uint32_t write_optimizer(const fs::path& path, const AdamW& opt, const OptimizerShard& shard,
                         const std::vector<SafetensorsWriter::Piece>* weights = nullptr) {
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

// The flat-buffer ranges a saved optimizer file holds, in the order of its
// compact state: from its "layout" metadata ("R of N: offset+numel ..."), or,
// for replicated state written without one, every parameter in table order.
std::vector<ParamRange> saved_ranges(const std::map<std::string, std::string>& metadata, const std::string& path,
                                     const std::vector<ParamInfo>& table) {
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
    if (plus == std::string::npos) throw CheckpointError(path + ": malformed layout entry '" + tok + "'");
    out.push_back({std::stoll(tok.substr(0, plus)), std::stoll(tok.substr(plus + 1)), true});
  }
  return out;
}

// The weights of a sharded checkpoint: every rank file's "weights" tensor
// holds its ranges of the flat layout; together they tile the model. Opens
// only the headers; a read touches just the files and bytes it needs.
class ShardedCheckpointWeights : public WeightSource {
 public:
  ShardedCheckpointWeights(const fs::path& ckpt, int shards, const std::vector<ParamInfo>& table) {
    for (int r = 0; r < shards; ++r) {
      const std::string path = (ckpt / optim_file_name(r)).string();
      files_.push_back(SafetensorsIndex::open(path));
      const SafetensorsIndex& f = files_.back();
      if (!f.has(kShardWeights) || f.at(kShardWeights).dtype != "F32")
        throw CheckpointError(path + ": no f32 '" + std::string(kShardWeights) + "' tensor (a sharded checkpoint's rank file holds its weights)");
      int64_t pos = 0;
      for (const ParamRange& r2 : saved_ranges(f.metadata(), path, table)) {
        pieces_.push_back({r2.offset, r2.numel, static_cast<int>(files_.size() - 1), pos});
        pos += r2.numel;
      }
      if (pos != f.at(kShardWeights).numel)
        throw CheckpointError(path + ": '" + std::string(kShardWeights) + "' holds " + std::to_string(f.at(kShardWeights).numel) +
                              " elements, its layout " + std::to_string(pos));
    }
    std::sort(pieces_.begin(), pieces_.end(), [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
    int64_t end = 0;
    for (const Piece& p : pieces_) {
      if (p.offset != end)
        throw CheckpointError(ckpt.string() + ": the rank files' weights " +
                              (p.offset < end ? "overlap" : "leave a gap") + " at element " + std::to_string(std::min(p.offset, end)));
      end = p.offset + p.numel;
    }
    int64_t numel = 0;
    for (const ParamInfo& p : table) numel += p.numel;
    if (end != numel)
      throw CheckpointError(ckpt.string() + ": the rank files' weights cover " + std::to_string(end) + " of the model's " +
                            std::to_string(numel) + " elements");
  }

  void read(int64_t offset, Tensor dst) const override {
    const int64_t n = dst.numel();
    float* out = dst.f32();
    auto it = std::upper_bound(pieces_.begin(), pieces_.end(), offset,
                               [](int64_t o, const Piece& p) { return o < p.offset; });
    if (it != pieces_.begin()) --it;
    for (; it != pieces_.end() && it->offset < offset + n; ++it) {
      const int64_t b = std::max(offset, it->offset), e = std::min(offset + n, it->offset + it->numel);
      if (b < e) files_[it->file].read_raw(kShardWeights, it->pos + (b - it->offset), e - b, out + (b - offset));
    }
  }

 private:
  struct Piece {
    int64_t offset, numel;  // in the flat layout
    int file;
    int64_t pos;  // in that file's tensor
  };
  std::vector<SafetensorsIndex> files_;
  std::vector<Piece> pieces_;
};

// meta.json into tmp, then tmp becomes dir/step-N and `latest` names it;
// prunes beyond `keep`.
std::string publish(const std::string& dir, const fs::path& tmp, int64_t num_params,
                    const CheckpointMeta& meta, int shards, const nlohmann::json& files, int keep,
                    bool sharded_weights = false) {
  const std::string name = "step-" + std::to_string(meta.step);
  const fs::path final_dir = fs::path(dir) / name;
  nlohmann::json m = {{"format", kFormat},
                      {"step", meta.step},
                      {"data", {{"next_step", meta.step}}},
                      {"last_loss", meta.last_loss},
                      {"world", {{"size", meta.world_size}, {"optimizer_shards", shards}}},
                      {"model", {{"num_params", num_params}}},
                      {"config", meta.config_yaml},
                      {"files", files}};
  // Weights in the rank files (each rank's ranges) rather than HF files.
  if (sharded_weights) m["weights"] = "sharded";
  m[kMetaChecksum] = meta_digest(m);
  {
    std::ofstream out(tmp / "meta.json");
    out << m.dump(2) << "\n";
    if (!out.flush()) throw CheckpointError((tmp / "meta.json").string() + ": write failed");
  }
  fsync_path((tmp / "meta.json").string());
  fsync_path(tmp.string());
  fs::remove_all(final_dir);  // a stale copy of the same step, e.g. after a restart
  fs::rename(tmp, final_dir);
  fsync_path(dir);
  write_text_atomically(fs::path(dir) / "latest", name + "\n");
  fsync_path(dir);

  std::vector<std::string> all = list_checkpoints(dir);
  for (size_t i = static_cast<size_t>(std::max(keep, 1)); i < all.size(); ++i)
    fs::remove_all(all[i]);
  return final_dir.string();
}

}  // namespace

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
      for (const WrittenFile& f : write_hf_model(tmp.string(), model, meta.max_shard_bytes)) record(f.name, f.crc32);
    const std::string optim_file = optim_file_name(rank);
    record(optim_file, write_optimizer(tmp / optim_file, opt, {}));
    return publish(dir, tmp, model.num_params(), meta, 1, files, keep);
  } catch (const fs::filesystem_error& e) {
    throw CheckpointError(std::string("checkpoint write failed: ") + e.what());
  }
}

ShardedWrite::ShardedWrite(std::string dir, const ModelConfig& cfg, const CheckpointMeta& meta, int keep,
                           const OptimizerShard& shard, comm::Communicator& group)
    : dir_(std::move(dir)),
      cfg_(cfg),
      meta_(meta),
      keep_(keep),
      shard_(shard),
      group_(group),
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
      error_ = "checkpoint.dir " + dir_ + " is not shared by all ranks: rank " + std::to_string(group_.rank()) +
               " cannot see " + tmp_ + ", which rank 0 created. Sharded checkpoints (ZeRO, ISP) need one "
               "directory every rank writes its shard into (a ReadWriteMany volume, or hostPath on one node)";
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
    group_.all_reduce(Tensor::f32(&flag, {1}), comm::ReduceOp::Sum, "checkpoint directory shared")->wait();
    if (flag > 0 && error_.empty())
      error_ = "checkpoint.dir " + dir_ + " is not shared by all ranks (another rank cannot see " + tmp_ +
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
          tmp_, cfg_, table, DType::F32, [&](int i, int64_t first, Tensor dst) { src.read(table[i].offset + first, dst); },
          meta_.max_shard_bytes);
    }
    for (const WrittenFile& f : model_files) files[f.name] = {{"bytes", fs::file_size(tmp / f.name)}, {"crc32", f.crc32}};
    for (int r = 0; r < shard_.shards; ++r) record(optim_file_name(r));
    result = publish(dir_, tmp, num_params, meta_, shard_.shards, files, keep_, /*sharded_weights=*/true);
  });
  group_.barrier("checkpoint " + name_ + " published")->wait();
  if (not_shared_) throw ConfigError(error_);
  if (!error_.empty()) throw CheckpointError(error_);
  return result;
}

namespace {

std::vector<SafetensorsWriter::Piece> host_pieces(const Tensor& t) {
  WEFT_CHECK(t.device == Device::CPU && t.dtype == DType::F32, "a shard's weights are f32 host memory");
  return {{t.data, t.nbytes()}};
}

}  // namespace

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

namespace {

// Throws unless `f` holds `name` as F32 of n elements.
void require_f32(const SafetensorsIndex& f, const std::string& name, int64_t n) {
  const SafetensorsIndex::Entry& e = f.at(name);
  if (e.dtype != "F32" || e.numel != n)
    throw CheckpointError(f.path() + ": tensor '" + name + "' is " + e.dtype + " of " + std::to_string(e.numel) +
                          " elements, expected F32 of " + std::to_string(n));
}

}  // namespace

int64_t reshard_optimizer(const std::string& ckpt, int saved_shards, const std::vector<ParamInfo>& table, AdamW& opt) {
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
      throw CheckpointError(path + ": missing (re-sharding reads every rank's optimizer file; "
                                   "the checkpoint directory must be shared by all ranks)");
    // Headers only: just the overlapping element ranges are read, so a rank
    // never holds another rank's whole file (weights included).
    const SafetensorsIndex f = SafetensorsIndex::open(path);
    auto sc = f.metadata().find("step_count");
    if (sc == f.metadata().end()) throw CheckpointError(path + ": no step_count");
    const int64_t this_count = std::stoll(sc->second);
    if (step_count >= 0 && this_count != step_count)
      throw CheckpointError(path + ": step_count " + std::to_string(this_count) + ", other shards " +
                            std::to_string(step_count));
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
    throw CheckpointError(ckpt + ": the saved optimizer shards cover " + std::to_string(copied) + " of this rank's " +
                          std::to_string(total) + " optimizer elements");
  return step_count;
}

std::optional<CheckpointMeta> load_latest_checkpoint(const std::string& dir, Llama& model,
                                                     AdamW& opt, int rank) {
  return load_latest_checkpoint(dir, model, opt, OptimizerShard{rank, 1, 1, {}});
}

std::optional<CheckpointMeta> load_latest_checkpoint(const std::string& dir, Llama& model,
                                                     AdamW& opt, const OptimizerShard& shard) {
  return load_latest_checkpoint(dir, model.config(), opt, shard,
                                [&](const WeightSource& src) { src.read_params_into(model.buffer()); });
}

std::optional<CheckpointMeta> load_latest_checkpoint(const std::string& dir, const ModelConfig& cfg, AdamW& opt,
                                                     const OptimizerShard& shard,
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
      if (meta.contains("config") && meta["config"].is_string() && !meta["config"].get<std::string>().empty()) {
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
          throw ConfigError("the model config differs from the checkpoint in " + c + ": " + all +
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
        spdlog::info("optimizer state re-sharded from {} (world size {}, {} shard{}) to world size {}, {} shard{}", c,
                     saved_world, saved_shards, saved_shards == 1 ? "" : "s", shard.world, shard.shards,
                     shard.shards == 1 ? "" : "s");
      }
      opt.set_step_count(step_count);

      CheckpointMeta out;
      out.step = meta["step"].get<int64_t>();
      out.last_loss = meta.value("last_loss", 0.0);
      out.world_size = meta["world"].value("size", 1);
      out.config_yaml = meta.value("config", "");
      out.identity = meta_digest(meta);
      if (!problems.empty())
        spdlog::warn("resuming from the older checkpoint {} instead", c);
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
  throw CheckpointError("no valid checkpoint in " + dir + " (remove the directory to start over):" + all);
}

RunCheckpoints::RunCheckpoints(const WorkerConfig& cfg, std::string dir, StrategyState& state, Llama& model,
                               bool via_full, int rank, int world, comm::Communicator* group)
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
    return OptimizerShard{group_->rank(), state_.optimizer_shards(), world_, state_.optimizer_layout()};
  return OptimizerShard{0, 1, world_, {}};
}

std::string export_hf(const std::string& checkpoint, const std::string& out, const std::atomic<int>* stop) {
  fs::path ckpt = checkpoint;
  if (!fs::exists(ckpt / "meta.json")) {
    const std::string latest = read_latest(ckpt.string());
    if (latest.empty())
      throw CheckpointError(checkpoint + ": not a checkpoint (no meta.json) nor a checkpoint directory (no 'latest')");
    ckpt /= latest;
  }
  const nlohmann::json meta = verify(ckpt);
  const std::string yaml = meta.value("config", "");
  if (yaml.empty()) throw CheckpointError((ckpt / "meta.json").string() + ": no config to take the model from");
  const WorkerConfig saved = parse_config(yaml, (ckpt / "meta.json").string() + " config");
  const ModelConfig& cfg = saved.model;
  const std::vector<ParamInfo> table = llama_param_table(cfg);
  std::optional<HfWeights> hf;
  std::unique_ptr<WeightSource> src;
  if (meta.value("weights", "") == "sharded") {
    src = std::make_unique<ShardedCheckpointWeights>(ckpt, meta["world"].value("optimizer_shards", 1), table);
  } else {
    hf.emplace(HfWeights::open(ckpt.string()));
    check_hf_weights(*hf, table, cfg.tie_embeddings);
    src = std::make_unique<HfWeightSource>(*hf, table);
  }
  std::error_code ec;
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec)))
    throw CheckpointError(out + ": exists and is not an empty directory (nothing was written)");
  const fs::path tmp = fs::path(out).string() + ".tmp-" + std::to_string(::getpid());
  try {
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    write_hf_model(
        tmp.string(), cfg, table, DType::F32,
        [&](int i, int64_t first, Tensor dst) {
          if (stop && stop->load() != 0) throw StopRequested("stopped by a signal while exporting " + ckpt.string());
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
  auto meta = load_latest_checkpoint(dir_, cfg_.model, staged ? *staged : state_.optimizer(), where,
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
  saved.seconds = pending_blocked_s_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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

std::optional<RunCheckpoints::Saved> RunCheckpoints::save(int64_t steps_completed, double last_loss, CheckpointKind kind) {
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
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  Saved saved;
  saved.step = steps_completed;
  if (sharded()) {
    // Each rank writes what it owns, weights and optimizer state, in the
    // full model's layout; nobody gathers the model. The last checkpoint of
    // a run also gets the HF model files, streamed from those.
    WEFT_CHECK(!pending_, "save: the previous checkpoint is still being written (complete() first)");
    const bool background = kind == CheckpointKind::Periodic && async();
    auto write_now = [&](ShardedWrite& w, const AdamW& opt, const std::vector<SafetensorsWriter::Piece>& weights) {
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
      ShardedWrite w(dir_, cfg_.model, meta, keep, shard(), *group_);
      w.begin();
      return write_now(w, opt, weights);
    }
    auto part = std::make_unique<AdamW>(state_.export_shard());  // a host snapshot
    const OptimizerShard where = state_.shards_weights()
                                     ? OptimizerShard{rank_, world_, world_, optimizer_layout(rank_, world_, *part)}
                                     : shard();
    auto write = std::make_unique<ShardedWrite>(dir_, cfg_.model, meta, keep, where, *group_);
    write->begin();
    if (!background) return write_now(*write, *part, host_pieces(part->master()));
    pending_ = std::move(write);
    pending_part_ = std::move(part);
    writer_ = std::thread([this] { pending_->write(*pending_part_, host_pieces(pending_part_->master())); });
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
  if (state_.optimizer().device() != Device::CPU) host_opt.emplace(state_.optimizer().copy_to(Device::CPU));
  const AdamW& opt = host_opt ? *host_opt : state_.optimizer();
  saved.path = save_checkpoint(dir_, weights, opt, meta, keep, 0);
  saved.seconds = seconds();
  return saved;
}

}  // namespace weft
