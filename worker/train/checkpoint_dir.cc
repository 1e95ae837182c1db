// A checkpoint directory: step-N directories, each with a meta.json that
// records every file's size and CRC and its own checksum, the `latest` file
// naming the newest published one, publishing and pruning.
#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "small_file.h"
#include "train/checkpoint_files.h"

namespace weft {

namespace checkpoint_files {

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

uint32_t meta_digest(nlohmann::json meta) {
  meta.erase(kMetaChecksum);
  const std::string text = meta.dump();
  return static_cast<uint32_t>(
      ::crc32(0L, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())));
}

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

nlohmann::json verify(const fs::path& ckpt, const std::function<void()>& each_mib) {
  fs::path meta_path = ckpt / "meta.json";
  const SmallFile f = read_small_file(meta_path.string(), kMaxTextFileBytes);
  if (f.status == SmallFile::Status::Missing)
    throw CheckpointError(meta_path.string() + ": missing");
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
  if (!meta[kMetaChecksum].is_number_unsigned() ||
      meta[kMetaChecksum].get<uint32_t>() != meta_digest(meta))
    throw CheckpointError(meta_path.string() + ": edited after it was written (its " +
                          kMetaChecksum + " does not match its contents)");
  // The directory's name is what `latest` and the pruning go by: a step that
  // disagrees with it would resume one checkpoint's state as another's step.
  const fs::path dir_name = ckpt.has_filename() ? ckpt.filename() : ckpt.parent_path().filename();
  const int64_t dir_step = step_of(dir_name.string());
  if (dir_step >= 0 && (!meta.contains("step") || !meta["step"].is_number_integer() ||
                        meta["step"].get<int64_t>() != dir_step))
    throw CheckpointError(meta_path.string() + ": step " +
                          (meta.contains("step") ? meta["step"].dump() : "missing") +
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
    uint32_t crc = crc32_of_file(file.string(), each_mib);
    if (crc != (*it)["crc32"].get<uint32_t>())
      throw CheckpointError(file.string() + ": checksum mismatch (corrupt)");
  }
  return meta;
}

std::string publish(const std::string& dir, const fs::path& tmp, int64_t num_params,
                    const CheckpointMeta& meta, int shards, const nlohmann::json& files, int keep,
                    bool sharded_weights) {
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

}  // namespace checkpoint_files

using namespace checkpoint_files;

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

}  // namespace weft
