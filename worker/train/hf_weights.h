// Model weights in the Hugging Face layout, both ways.
//
// A weight set is dir/model.safetensors, or dir/model.safetensors.index.json
// ({"metadata": {"total_size"}, "weight_map": {tensor: file}}) and the
// model-0000k-of-0000N.safetensors shards it names. Tensors carry HF Llama
// names (ParamInfo::name) and may be stored as F32, BF16 or F16; reads convert
// to the parameter's dtype. Only headers are read on open; tensor data is read
// per tensor or per element range, so a rank whose strategy shards parameters
// (ZeRO, ISP) reads only its part (read() with a range, or HfWeightSource,
// a WeightSource in the model's flat layout).
//
// write_hf_model writes the weights with config.json and
// generation_config.json, so every checkpoint directory is also a model
// directory for transformers' from_pretrained.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/llama.h"
#include "model/param_info.h"
#include "train/safetensors.h"

namespace weft {

inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;  // HF's "5GB"

class HfWeights {
 public:
  // Opens the index (or the single file) and every shard's header. Throws
  // CheckpointError naming the file when one is missing or inconsistent.
  static HfWeights open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  // Throws CheckpointError if absent.
  const SafetensorsIndex::Entry& entry(const std::string& name) const;
  std::vector<std::string> names() const;
  // The weight files, relative to the directory (one, or the shards).
  std::vector<std::string> files() const;
  // Elements [first, first + dst.numel()) of `name`, converted into dst (a
  // host F32 or BF16 tensor). Throws CheckpointError for an unsupported
  // stored dtype or a range outside the tensor.
  void read(const std::string& name, int64_t first, Tensor dst) const;

 private:
  std::string dir_;
  std::vector<SafetensorsIndex> files_;
  std::map<std::string, size_t> where_;  // tensor -> index into files_
};

// Checks that `w` holds each parameter with its exact shape and nothing the
// model would silently ignore (a tied model may carry lm_head.weight; old
// transformers wrote rotary_emb.inv_freq buffers: both are skipped). Throws
// CheckpointError listing every problem.
void check_hf_weights(const HfWeights& w, const std::vector<ParamInfo>& params, bool tied);

// Checks (as above) and loads every parameter into model's parameter buffer
// (a whole model in memory: the worker itself reads HF files through
// HfWeightSource, each rank only what it keeps).
void load_hf_weights(const HfWeights& w, Llama& model);

// A weight set read by range in the flat layout of `table` (a model's
// parameter table; check_hf_weights it first).
class HfWeightSource : public PerParamWeightSource {
 public:
  HfWeightSource(const HfWeights& w, std::vector<ParamInfo> table)
      : PerParamWeightSource(std::move(table)), w_(w) {}

 protected:
  void read_param(const ParamInfo& p, int64_t first, Tensor dst) const override { w_.read(p.name, first, dst); }

 private:
  const HfWeights& w_;
};

struct WrittenFile {
  std::string name;  // relative to the directory
  uint32_t crc32;
};

// Writes model's weights into dir (which must exist) as model.safetensors, or
// as shards of at most max_shard_bytes (a tensor larger than that gets a shard
// of its own) plus the index, then config.json and generation_config.json.
// Every file is fsynced. Returns the files written, in order.
std::vector<WrittenFile> write_hf_model(const std::string& dir, const Llama& model,
                                        uint64_t max_shard_bytes = kDefaultMaxShardBytes);

// The same for weights that are not in memory: fetch(i, first, dst) fills
// elements [first, first + dst.numel()) of parameter i of `params` into dst
// (a flat host tensor in `dtype`) as its file is written, a few MB at a
// time, so no tensor, let alone the model, is whole in memory (exports from
// sharded checkpoints).
using ParamFetch = std::function<void(int param, int64_t first, Tensor dst)>;
std::vector<WrittenFile> write_hf_model(const std::string& dir, const ModelConfig& cfg,
                                        const std::vector<ParamInfo>& params, DType dtype,
                                        const ParamFetch& fetch,
                                        uint64_t max_shard_bytes = kDefaultMaxShardBytes);

}  // namespace weft
