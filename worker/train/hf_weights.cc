#include "train/hf_weights.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/hf_config.h"
#include "small_file.h"
#include "tensor/bf16.h"

namespace weft {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // inf / NaN
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal: normalize
    exp = 113;
    while (!(man & 0x400u)) man <<= 1, --exp;
    u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<int64_t> dims(const Shape& s) { return std::vector<int64_t>(s.d.begin(), s.d.begin() + s.rank); }

std::string shape_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

uint32_t write_text_file(const fs::path& path, const std::string& text) {
  {
    std::ofstream out(path, std::ios::trunc | std::ios::binary);
    out << text;
    out.flush();
    if (!out) throw CheckpointError(path.string() + ": write failed");
  }
  fsync_path(path.string());
  return crc32_of_file(path.string());
}

bool ignorable(const std::string& name, bool tied) {
  if (tied && name == "lm_head.weight") return true;  // tied: the embedding is the head
  const std::string inv = "rotary_emb.inv_freq";
  return name.size() >= inv.size() && name.compare(name.size() - inv.size(), inv.size(), inv) == 0;
}

// A NaN or Inf weight would only show as a NaN loss at step 1: name the
// tensor and element at load instead. dst is a host F32 or BF16 tensor.
void check_finite(const std::string& file, const std::string& name, int64_t first, const Tensor& dst) {
  const int64_t n = dst.numel();
  int64_t bad = -1;
  float value = 0;
  if (dst.dtype == DType::F32) {
    const float* p = static_cast<const float*>(dst.data);
    for (int64_t i = 0; i < n && bad < 0; ++i)
      if (!std::isfinite(p[i])) bad = i, value = p[i];
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(dst.data);
    for (int64_t i = 0; i < n && bad < 0; ++i)
      if ((p[i] & 0x7f80) == 0x7f80) bad = i, value = bf16_to_f32(p[i]);  // exponent all ones
  }
  if (bad < 0) return;
  throw CheckpointError(file + ": tensor '" + name + "' holds a non-finite weight (" +
                        (std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf") + " at element " +
                        std::to_string(first + bad) + ")");
}

}  // namespace

HfWeights HfWeights::open(const std::string& dir) {
  HfWeights w;
  w.dir_ = dir;
  const fs::path index = fs::path(dir) / kIndexFile;
  std::error_code ec;
  if (fs::exists(index, ec)) {
    nlohmann::json j;
    const SmallFile f = read_small_file(index.string(), kMaxTextFileBytes);
    if (!f.ok()) throw CheckpointError(f.problem.empty() ? index.string() + ": cannot read" : f.problem);
    try {
      j = nlohmann::json::parse(f.text);
    } catch (const nlohmann::json::exception& e) {
      throw CheckpointError(index.string() + ": not valid JSON (" + e.what() + ")");
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw CheckpointError(index.string() + ": no weight_map object");
    std::map<std::string, size_t> file_slot;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string()) throw CheckpointError(index.string() + ": weight_map." + it.key() + " is not a file name");
      const std::string file = it->get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
        throw CheckpointError(index.string() + ": weight_map." + it.key() + " names '" + file +
                              "', not a file in the directory");
      auto [slot, added] = file_slot.emplace(file, w.files_.size());
      if (added) w.files_.push_back(SafetensorsIndex::open((fs::path(dir) / file).string()));
      if (!w.files_[slot->second].has(it.key()))
        throw CheckpointError(w.files_[slot->second].path() + ": missing tensor '" + it.key() +
                              "' (the index puts it there)");
      w.where_[it.key()] = slot->second;
    }
    return w;
  }
  const fs::path single = fs::path(dir) / kSingleFile;
  if (!fs::exists(single, ec))
    throw CheckpointError(dir + ": no " + kSingleFile + " and no " + kIndexFile);
  w.files_.push_back(SafetensorsIndex::open(single.string()));
  for (const auto& [name, e] : w.files_[0].tensors()) w.where_[name] = 0;
  return w;
}

const SafetensorsIndex::Entry& HfWeights::entry(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw CheckpointError(dir_ + ": missing tensor '" + name + "'");
  return files_[it->second].at(name);
}

std::vector<std::string> HfWeights::names() const {
  std::vector<std::string> out;
  for (const auto& [name, slot] : where_) out.push_back(name);
  return out;
}

std::vector<std::string> HfWeights::files() const {
  std::vector<std::string> out;
  for (const SafetensorsIndex& f : files_) out.push_back(fs::path(f.path()).filename().string());
  return out;
}

void HfWeights::read(const std::string& name, int64_t first, Tensor dst) const {
  const SafetensorsIndex& file = files_[where_.count(name) ? where_.at(name) : 0];
  const SafetensorsIndex::Entry& e = entry(name);
  WEFT_CHECK(dst.device == Device::CPU && (dst.dtype == DType::F32 || dst.dtype == DType::BF16),
             "HfWeights::read fills host F32 or BF16 tensors");
  if (e.dtype != "F32" && e.dtype != "BF16" && e.dtype != "F16")
    throw CheckpointError(file.path() + ": tensor '" + name + "' is " + e.dtype +
                          "; weights must be F32, BF16 or F16");
  const int64_t n = dst.numel();
  if ((e.dtype == "F32" && dst.dtype == DType::F32) || (e.dtype == "BF16" && dst.dtype == DType::BF16)) {
    file.read_raw(name, first, n, dst.data);
    return check_finite(file.path(), name, first, dst);
  }
  // Convert in chunks so a large tensor needs no second full-size copy.
  constexpr int64_t kChunk = 1 << 20;
  std::vector<char> buf;
  for (int64_t done = 0; done < n; done += kChunk) {
    const int64_t c = std::min(kChunk, n - done);
    buf.resize(static_cast<size_t>(c) * safetensors_dtype_size(e.dtype));
    file.read_raw(name, first + done, c, buf.data());
    for (int64_t i = 0; i < c; ++i) {
      float v;
      if (e.dtype == "F32") {
        std::memcpy(&v, buf.data() + 4 * i, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, buf.data() + 2 * i, 2);
        v = e.dtype == "BF16" ? bf16_to_f32(h) : f16_to_f32(h);
      }
      if (dst.dtype == DType::F32)
        static_cast<float*>(dst.data)[done + i] = v;
      else
        static_cast<uint16_t*>(dst.data)[done + i] = f32_to_bf16(v);
    }
  }
  check_finite(file.path(), name, first, dst);
}

void check_hf_weights(const HfWeights& w, const std::vector<ParamInfo>& params, bool tied) {
  std::vector<std::string> problems;
  std::map<std::string, bool> used;
  for (const std::string& n : w.names()) used[n] = false;
  for (const ParamInfo& p : params) {
    if (!w.has(p.name)) {
      problems.push_back("missing tensor '" + p.name + "'");
      continue;
    }
    used[p.name] = true;
    const auto& e = w.entry(p.name);
    if (e.shape != dims(p.shape))
      problems.push_back("tensor '" + p.name + "' has shape " + shape_text(e.shape) +
                         ", the model needs " + shape_text(dims(p.shape)));
    else if (e.dtype != "F32" && e.dtype != "BF16" && e.dtype != "F16")
      problems.push_back("tensor '" + p.name + "' is " + e.dtype + " (weights must be F32, BF16 or F16)");
  }
  for (const auto& [name, u] : used)
    if (!u && !ignorable(name, tied))
      problems.push_back("tensor '" + name + "' is not a weight of this model" +
                         (name == "lm_head.weight" ? " (model.tie_embeddings is true)" : ""));
  if (problems.empty()) return;
  std::string all;
  for (const std::string& p : problems) all += (all.empty() ? "" : "; ") + p;
  throw CheckpointError(w.dir() + ": weights do not fit the model: " + all);
}

void load_hf_weights(const HfWeights& w, Llama& model) {
  check_hf_weights(w, model.params(), model.config().tie_embeddings);
  HfWeightSource(w, model.params()).read_params_into(model.buffer());
}

namespace {

// The files of write_hf_model; add(w, i) puts parameter i into w.
std::vector<WrittenFile> write_hf_files(const std::string& dir, const ModelConfig& cfg,
                                        const std::vector<ParamInfo>& params, DType dtype,
                                        const std::function<void(SafetensorsWriter&, int)>& add,
                                        uint64_t max_shard_bytes) {
  const uint64_t esize = dtype_size(dtype);
  // Shards in parameter order: a new one when the next tensor would overflow.
  std::vector<std::vector<int>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const uint64_t b = static_cast<uint64_t>(params[i].numel) * esize;
    if (!shards.back().empty() && in_shard + b > max_shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(static_cast<int>(i));
    in_shard += b;
    total += b;
  }
  std::vector<WrittenFile> out;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    std::string name = kSingleFile;
    if (shards.size() > 1) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
      name = buf;
    }
    SafetensorsWriter wr;
    wr.set_metadata("format", "pt");
    for (int i : shards[s]) {
      add(wr, i);
      weight_map[params[i].name] = name;
    }
    out.push_back({name, wr.write((fs::path(dir) / name).string())});
  }
  if (shards.size() > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    out.push_back({kIndexFile, write_text_file(fs::path(dir) / kIndexFile, index.dump(2) + "\n")});
  }
  out.push_back({"config.json", write_text_file(fs::path(dir) / "config.json",
                                                hf_config_json(cfg, dtype == DType::BF16 ? "bfloat16" : "float32"))});
  out.push_back({"generation_config.json",
                 write_text_file(fs::path(dir) / "generation_config.json", hf_generation_config_json())});
  return out;
}

}  // namespace

std::vector<WrittenFile> write_hf_model(const std::string& dir, const Llama& model,
                                        uint64_t max_shard_bytes) {
  const DType dt = model.params().empty() ? DType::F32 : model.param(0).dtype;
  return write_hf_files(
      dir, model.config(), model.params(), dt,
      [&](SafetensorsWriter& w, int i) { w.add(model.params()[i].name, model.param(i)); }, max_shard_bytes);
}

std::vector<WrittenFile> write_hf_model(const std::string& dir, const ModelConfig& cfg,
                                        const std::vector<ParamInfo>& params, DType dtype,
                                        const ParamFetch& fetch, uint64_t max_shard_bytes) {
  return write_hf_files(
      dir, cfg, params, dtype,
      [&](SafetensorsWriter& w, int i) {
        const ParamInfo& p = params[i];
        const std::vector<int64_t> shape(p.shape.d.begin(), p.shape.d.begin() + p.shape.rank);
        w.add_streamed(p.name, dtype == DType::BF16 ? "BF16" : "F32", shape,
                       [&fetch, i, dtype](int64_t first, int64_t count, void* dst) {
                         fetch(i, first, Tensor(dst, dtype, {count}));
                       });
      },
      max_shard_bytes);
}

}  // namespace weft
