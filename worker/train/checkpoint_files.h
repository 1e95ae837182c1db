// The pieces of the checkpoint format that its writers and readers share
// (internal to train/; the API is checkpoint.h): a checkpoint directory's
// meta.json, `latest` and publishing (checkpoint_dir.cc), and the rank files
// of the optimizer state with, in a sharded checkpoint, each rank's weights
// (checkpoint_shards.cc).
// defines: kFormat, kMetaChecksum, kShardWeights, step_of, write_text_atomically, meta_digest,
// read_latest, verify, publish, optim_file_name, write_optimizer, saved_ranges,
// ShardedCheckpointWeights, require_f32.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/checkpoint.h"

namespace weft::checkpoint_files {

namespace fs = std::filesystem;

inline constexpr const char* kFormat = "weft-checkpoint-1";
// meta.json's own checksum field (meta_digest).
inline constexpr const char* kMetaChecksum = "meta_crc32";
// The tensor of a sharded checkpoint's rank file that holds the rank's
// weights (f32, the ranges of its "layout").
inline constexpr const char* kShardWeights = "weights";

// The step of a "step-N" directory name; -1 for any other name.
int64_t step_of(const std::string& name);
// Writes `text` to path.tmp, fsyncs it and renames it over `path`.
void write_text_atomically(const fs::path& path, const std::string& text);
// meta.json's own checksum: over its canonical text without the checksum
// field (nlohmann's objects are ordered, and doubles print to round-trip, so
// a parsed meta prints as it was written). A hand-edited step or next_step
// no longer passes as the writer's.
uint32_t meta_digest(nlohmann::json meta);
// The checkpoint `latest` names in `dir`; empty when there is no `latest`.
// A `latest` that is not a small regular file is refused (a FIFO would block).
std::string read_latest(const std::string& dir);
// Checks meta.json's records against the files; returns the parsed meta.
// `each_mib`: called before every MiB checksummed (crc32_of_file).
nlohmann::json verify(const fs::path& ckpt, const std::function<void()>& each_mib = {});
// meta.json into tmp, then tmp becomes dir/step-N and `latest` names it;
// prunes beyond `keep`.
std::string publish(const std::string& dir, const fs::path& tmp, int64_t num_params,
                    const CheckpointMeta& meta, int shards, const nlohmann::json& files, int keep,
                    bool sharded_weights = false);

std::string optim_file_name(int rank);
// A rank file: the optimizer's moments and step count, the shard's layout
// when sharded, and (sharded checkpoints) the f32 weights of its ranges.
uint32_t write_optimizer(const fs::path& path, const AdamW& opt, const OptimizerShard& shard,
                         const std::vector<SafetensorsWriter::Piece>* weights = nullptr);
// The flat-buffer ranges a saved optimizer file holds, in the order of its
// compact state: from its "layout" metadata ("R of N: offset+numel ..."), or,
// for replicated state written without one, every parameter in table order.
std::vector<ParamRange> saved_ranges(const std::map<std::string, std::string>& metadata,
                                     const std::string& path, const std::vector<ParamInfo>& table);

// The weights of a sharded checkpoint: every rank file's "weights" tensor
// holds its ranges of the flat layout; together they tile the model. Opens
// only the headers; a read touches just the files and bytes it needs.
class ShardedCheckpointWeights : public WeightSource {
 public:
  ShardedCheckpointWeights(const fs::path& ckpt, int shards, const std::vector<ParamInfo>& table);
  void read(int64_t offset, Tensor dst) const override;

 private:
  struct Piece {
    int64_t offset, numel;  // in the flat layout
    int file;
    int64_t pos;  // in that file's tensor
  };
  std::vector<SafetensorsIndex> files_;
  std::vector<Piece> pieces_;
};

// Throws unless `f` holds `name` as F32 of n elements.
void require_f32(const SafetensorsIndex& f, const std::string& name, int64_t n);

}  // namespace weft::checkpoint_files
