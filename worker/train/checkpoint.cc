#include "train/checkpoint.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

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

struct FileRecord {
  uint64_t bytes;
  uint32_t crc;
};

// Checks meta.json's records against the files; returns the parsed meta.
nlohmann::json verify(const fs::path& ckpt) {
  fs::path meta_path = ckpt / "meta.json";
  std::ifstream in(meta_path);
  if (!in) throw CheckpointError(meta_path.string() + ": missing");
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw CheckpointError(meta_path.string() + ": not valid JSON (" + e.what() + ")");
  }
  if (meta.value("format", "") != kFormat)
    throw CheckpointError(meta_path.string() + ": unknown format " + meta.value("format", "''"));
  if (!meta.contains("files") || !meta["files"].is_object())
    throw CheckpointError(meta_path.string() + ": no file records");
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

void save_model_weights(const std::string& path, const Llama& model) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  add_model(w, model);
  w.write(path);
}

namespace {

std::string optim_file_name(int rank) { return "optim-rank-" + std::to_string(rank) + ".safetensors"; }

uint32_t write_optimizer(const fs::path& path, const AdamW& opt, const OptimizerShard& shard) {
  SafetensorsWriter o;
  o.set_metadata("step_count", std::to_string(opt.step_count()));
  if (shard.shards > 1) {
    o.set_metadata("shard", std::to_string(shard.rank) + "/" + std::to_string(shard.shards));
    o.set_metadata("layout", shard.layout);
  }
  o.add("exp_avg", opt.exp_avg());
  o.add("exp_avg_sq", opt.exp_avg_sq());
  return o.write(path.string());
}

// meta.json into tmp, then tmp becomes dir/step-N and `latest` names it;
// prunes beyond `keep`.
std::string publish(const std::string& dir, const fs::path& tmp, const Llama& model,
                    const CheckpointMeta& meta, int shards, const nlohmann::json& files, int keep) {
  const std::string name = "step-" + std::to_string(meta.step);
  const fs::path final_dir = fs::path(dir) / name;
  nlohmann::json m = {{"format", kFormat},
                      {"step", meta.step},
                      {"data", {{"next_step", meta.step}}},
                      {"last_loss", meta.last_loss},
                      {"world", {{"size", meta.world_size}, {"optimizer_shards", shards}}},
                      {"model", {{"num_params", model.num_params()}}},
                      {"config", meta.config_yaml},
                      {"files", files}};
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
    return publish(dir, tmp, model, meta, 1, files, keep);
  } catch (const fs::filesystem_error& e) {
    throw CheckpointError(std::string("checkpoint write failed: ") + e.what());
  }
}

std::string save_sharded_checkpoint(const std::string& dir, const Llama& model, const AdamW& opt,
                                    const CheckpointMeta& meta, int keep,
                                    const OptimizerShard& shard, comm::Communicator& group) {
  const std::string name = "step-" + std::to_string(meta.step);
  // One name every rank computes (a pid would differ per rank).
  const fs::path tmp = fs::path(dir) / (".tmp-" + name + "-shards");
  std::string result = (fs::path(dir) / name).string();
  // A rank whose write fails still joins the barriers (or its peers would
  // wait for the deadline) and throws after the last one.
  std::string error;
  auto attempt = [&](auto&& fn) {
    if (!error.empty()) return;
    try {
      fn();
    } catch (const fs::filesystem_error& e) {
      error = std::string("checkpoint write failed: ") + e.what();
    } catch (const CheckpointError& e) {
      error = e.what();
    }
  };
  attempt([&] {
    if (group.rank() != 0) return;
    fs::create_directories(dir);
    fs::remove_all(tmp);
    fs::create_directories(tmp);
  });
  group.barrier("checkpoint " + name + " directory")->wait();
  std::vector<WrittenFile> model_files;
  // Every rank writes into the directory rank 0 made: checkpoint.dir must be
  // one filesystem for all ranks (a shared volume). A rank that cannot see it
  // is a deployment mistake, not a transient I/O error: exit 1, no restarts.
  bool not_shared = false;
  attempt([&] {
    if (group.rank() != 0 && error.empty() && !fs::is_directory(tmp)) {
      not_shared = true;
      error = "checkpoint.dir " + dir + " is not shared by all ranks: rank " + std::to_string(group.rank()) +
              " cannot see " + tmp.string() + ", which rank 0 created. ZeRO checkpoints need one directory "
              "every rank writes its optimizer shard into (a ReadWriteMany volume, or hostPath on one node)";
      return;
    }
    if (group.rank() == 0) model_files = write_hf_model(tmp.string(), model, meta.max_shard_bytes);
    write_optimizer(tmp / optim_file_name(shard.rank), opt, shard);
  });
  group.barrier("checkpoint " + name + " shards")->wait();
  // Rank 0 learns of it here too, rather than from a missing file.
  {
    float flag = not_shared ? 1.0f : 0.0f;
    group.all_reduce(Tensor::f32(&flag, {1}), comm::ReduceOp::Sum, "checkpoint directory shared")->wait();
    if (flag > 0 && error.empty())
      error = "checkpoint.dir " + dir + " is not shared by all ranks (another rank cannot see " + tmp.string() +
              "); ZeRO checkpoints need one directory every rank writes into";
    not_shared = not_shared || flag > 0;
  }
  attempt([&] {
    if (group.rank() != 0) return;
    nlohmann::json files = nlohmann::json::object();
    auto record = [&](const std::string& file) {
      const fs::path p = tmp / file;
      files[file] = {{"bytes", fs::file_size(p)}, {"crc32", crc32_of_file(p.string())}};
    };
    for (const WrittenFile& f : model_files) files[f.name] = {{"bytes", fs::file_size(tmp / f.name)}, {"crc32", f.crc32}};
    for (int r = 0; r < shard.shards; ++r) record(optim_file_name(r));
    result = publish(dir, tmp, model, meta, shard.shards, files, keep);
  });
  group.barrier("checkpoint " + name + " published")->wait();
  if (not_shared) throw ConfigError(error);
  if (!error.empty()) throw CheckpointError(error);
  return result;
}

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
  cmp("ffn_hidden (effective)", saved.ffn(), now.ffn());
  cmp("tie_embeddings", saved.tie_embeddings, now.tie_embeddings);
  return out;
}

namespace {

// The flat-buffer ranges a saved optimizer file holds, in the order of its
// compact state: from its "layout" metadata ("R of N: offset+numel ..."), or,
// for replicated state written without one, every parameter in table order.
std::vector<ParamRange> saved_ranges(const SafetensorsFile& f, const Llama& model) {
  std::vector<ParamRange> out;
  auto lay = f.metadata().find("layout");
  if (lay == f.metadata().end()) {
    for (const ParamInfo& p : model.params()) out.push_back({p.offset, p.numel, true});
    return out;
  }
  const std::string& text = lay->second;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) throw CheckpointError(f.path() + ": malformed layout '" + text + "'");
  std::istringstream in(text.substr(colon + 1));
  std::string tok;
  while (in >> tok) {
    const size_t plus = tok.find('+');
    if (plus == std::string::npos) throw CheckpointError(f.path() + ": malformed layout entry '" + tok + "'");
    out.push_back({std::stoll(tok.substr(0, plus)), std::stoll(tok.substr(plus + 1)), true});
  }
  return out;
}

}  // namespace

int64_t reshard_optimizer(const std::string& ckpt, int saved_shards, const Llama& model, AdamW& opt) {
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
    SafetensorsFile f = SafetensorsFile::load(path);
    auto sc = f.metadata().find("step_count");
    if (sc == f.metadata().end()) throw CheckpointError(path + ": no step_count");
    const int64_t this_count = std::stoll(sc->second);
    if (step_count >= 0 && this_count != step_count)
      throw CheckpointError(path + ": step_count " + std::to_string(this_count) + ", other shards " +
                            std::to_string(step_count));
    step_count = this_count;
    const std::vector<ParamRange> theirs = saved_ranges(f, model);
    int64_t n = 0;
    for (const ParamRange& t : theirs) n += t.numel;
    const auto& m = f.get("exp_avg", DType::F32, n);
    const auto& v = f.get("exp_avg_sq", DType::F32, n);
    const float* m_in = static_cast<const float*>(static_cast<const void*>(m.data));
    const float* v_in = static_cast<const float*>(static_cast<const void*>(v.data));
    int64_t pos = 0;
    for (const ParamRange& t : theirs) {
      for (size_t i = 0; i < mine.size(); ++i) {
        const int64_t b = std::max(t.offset, mine[i].offset);
        const int64_t e = std::min(t.offset + t.numel, mine[i].offset + mine[i].numel);
        if (b >= e) continue;
        const int64_t src = pos + (b - t.offset), dst = mine_pos[i] + (b - mine[i].offset);
        std::memcpy(m_out + dst, m_in + src, static_cast<size_t>(e - b) * sizeof(float));
        std::memcpy(v_out + dst, v_in + src, static_cast<size_t>(e - b) * sizeof(float));
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
  const int rank = shard.rank;
  std::vector<std::string> candidates = list_checkpoints(dir);
  // `latest` first: it names what the writer finished last.
  std::ifstream lf(fs::path(dir) / "latest");
  std::string latest;
  if (lf >> latest) {
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
          saved.model = model.config();  // written by another version: let the tensors decide
        }
        const auto diff = model_shape_differences(saved.model, model.config());
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
      // Weights as one file or HF shards; checked in full before anything is
      // read into the model, like the optimizer state below.
      const HfWeights weights = HfWeights::open(c);
      check_hf_weights(weights, model.params(), model.config().tie_embeddings);
      // The same shards as saved: this rank's own file. Otherwise (another
      // world size, DP <-> ZeRO, or the bucket layout changed, e.g. by the
      // tuner) re-shard: gather this rank's ranges from every saved file.
      const std::string own = (fs::path(c) / optim_file).string();
      std::optional<SafetensorsFile> same;
      if (saved_shards == shard.shards && fs::exists(own)) {
        SafetensorsFile of = SafetensorsFile::load(own);
        auto lay = of.metadata().find("layout");
        const std::string saved_layout = lay == of.metadata().end() ? "" : lay->second;
        if (shard.shards == 1 || saved_layout == shard.layout) same.emplace(std::move(of));
      }
      int64_t step_count = 0;
      if (same) {
        const int64_t n = opt.exp_avg().numel();
        const auto& m = same->get("exp_avg", DType::F32, n);
        const auto& v = same->get("exp_avg_sq", DType::F32, n);
        auto sc = same->metadata().find("step_count");
        if (sc == same->metadata().end()) throw CheckpointError(same->path() + ": no step_count");
        step_count = std::stoll(sc->second);
        load_hf_weights(weights, model);
        std::memcpy(opt.exp_avg().data, m.data, m.bytes);
        std::memcpy(opt.exp_avg_sq().data, v.data, v.bytes);
      } else {
        step_count = reshard_optimizer(c, saved_shards, model, opt);
        load_hf_weights(weights, model);
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

std::optional<CheckpointMeta> RunCheckpoints::resume() {
  // Read into the model or a host f32 full model; the optimizer state into
  // the strategy's optimizer itself when it lives on the host, else a host
  // copy loaded back after; for sharded weights the ranges in the full
  // model's layout, of which this rank keeps its part.
  std::optional<Llama> full;
  if (via_full_) full.emplace(cfg_.model);
  std::optional<AdamW> staged;
  OptimizerShard where = shard();
  if (state_.shards_weights()) {
    staged.emplace(state_.export_optimizer(/*owned_only=*/false));
    where = OptimizerShard{rank_, world_, world_, optimizer_layout(rank_, world_, *staged)};
  } else if (state_.optimizer().device() != Device::CPU) {
    staged.emplace(state_.optimizer().copy_to(Device::CPU));
  }
  auto meta = load_latest_checkpoint(dir_, full ? *full : model_, staged ? *staged : state_.optimizer(), where);
  if (!meta) return std::nullopt;
  if (full) state_.load_full_weights(full->buffer());
  if (state_.shards_weights())
    state_.import_optimizer(*staged);
  else if (staged)
    state_.optimizer().load_state(*staged);
  return meta;
}

std::optional<RunCheckpoints::Saved> RunCheckpoints::save(int64_t steps_completed, double last_loss) {
  state_.flush();  // overlapped parameter gathers land before the weights are written
  // The weights at full precision: the model itself, or a full host f32
  // copy gathered from the strategy (collective for sharded weights and
  // ZeRO's master copy, so every rank takes part).
  const bool sharded_weights = state_.shards_weights();
  std::unique_ptr<Llama> full;
  if (via_full_ && (sharded_weights || state_.writes_optimizer_state())) {
    full = std::make_unique<Llama>(cfg_.model);
    state_.gather_full_weights(full->buffer());
  }
  if (!sharded_weights && !state_.writes_optimizer_state()) return std::nullopt;  // replicated: one rank writes
  const Llama& weights = full ? *full : model_;
  std::optional<AdamW> host_opt;  // device optimizer state goes through the host
  if (!sharded_weights && state_.optimizer().device() != Device::CPU)
    host_opt.emplace(state_.optimizer().copy_to(Device::CPU));
  const AdamW& opt = host_opt ? *host_opt : state_.optimizer();
  CheckpointMeta meta;
  meta.step = steps_completed;
  meta.last_loss = last_loss;
  meta.world_size = world_;
  meta.config_yaml = to_yaml(cfg_);
  meta.max_shard_bytes = static_cast<uint64_t>(cfg_.checkpoint.max_shard_mb * 1e6);
  const int keep = cfg_.checkpoint.keep;
  const auto t0 = std::chrono::steady_clock::now();
  Saved saved;
  if (sharded_weights) {
    // The full model (HF-named) and every rank's optimizer ranges in its
    // layout, each element written by one rank.
    const AdamW owned = state_.export_optimizer(/*owned_only=*/true);
    saved.path = world_ > 1 ? save_sharded_checkpoint(dir_, *full, owned, meta, keep,
                                                      OptimizerShard{rank_, world_, world_,
                                                                     optimizer_layout(rank_, world_, owned)},
                                                      *group_)
                            : save_checkpoint(dir_, *full, owned, meta, keep, 0);
  } else {
    const OptimizerShard where = shard();
    saved.path = where.shards > 1 ? save_sharded_checkpoint(dir_, weights, opt, meta, keep, where, *group_)
                                  : save_checkpoint(dir_, weights, opt, meta, keep, 0);
  }
  saved.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return saved;
}

}  // namespace weft
