// Reading and writing the safetensors format (8-byte little-endian header
// length, JSON header {name: {dtype, shape, data_offsets}, __metadata__}, then
// the raw tensor bytes), so checkpoints load in PyTorch and transformers.
// Readers validate everything they rely on and throw CheckpointError naming
// the file and the problem; they never trust sizes from the file.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace weft {

// The largest header a reader accepts (the safetensors library's own limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class SafetensorsWriter {
 public:
  // The data must stay alive until write() returns.
  void add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
           const void* data);
  void add(const std::string& name, const Tensor& t);
  // Any safetensors dtype by name ("F16"), for data weft has no DType for.
  void add(const std::string& name, const std::string& st_dtype, const std::vector<int64_t>& shape,
           const void* data);
  // A tensor whose elements `fill(first, count, dst)` produces while write()
  // runs, a chunk of at most kStreamChunkBytes at a time: a file of tensors
  // that are never in memory (exports streamed from checkpoint shards).
  static constexpr size_t kStreamChunkBytes = 4 << 20;
  using Fill = std::function<void(int64_t first, int64_t count, void* dst)>;
  void add_streamed(const std::string& name, const std::string& st_dtype, const std::vector<int64_t>& shape,
                    Fill fill);
  // A tensor whose bytes lie in several places, written one after another
  // without being copied together (a shard's ranges of a flat buffer).
  struct Piece {
    const void* data;
    size_t bytes;
  };
  void add_pieces(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                  std::vector<Piece> pieces);
  void set_metadata(const std::string& key, const std::string& value) { meta_[key] = value; }
  // Writes and fsyncs path. Returns the CRC-32 (zlib) of the bytes written.
  uint32_t write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    const void* data;
    size_t bytes;
    Fill fill;                        // instead of data
    std::vector<Piece> pieces;        // instead of data
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> meta_;
};

class SafetensorsFile {
 public:
  struct View {
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;
    size_t bytes;
  };
  // Reads the whole file; throws CheckpointError on any inconsistency.
  static SafetensorsFile load(const std::string& path);

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws CheckpointError if absent or not of this dtype and element count.
  const View& get(const std::string& name, DType dtype, int64_t numel) const;
  const std::map<std::string, View>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return meta_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<char> bytes_;
  std::map<std::string, View> tensors_;
  std::map<std::string, std::string> meta_;
};

// The header of a safetensors file, read without its data, and reads of single
// tensors (or element ranges of them) on demand: what a rank that needs only
// part of a large checkpoint uses. Dtypes are the format's names ("F32",
// "BF16", "F16", "I64", ...), including those weft's tensors do not have.
class SafetensorsIndex {
 public:
  struct Entry {
    std::string dtype;           // safetensors name, e.g. "BF16"
    std::vector<int64_t> shape;
    int64_t numel = 0;
    uint64_t offset = 0;         // of the first byte in the file
    uint64_t bytes = 0;
  };
  // Reads and validates the header; throws CheckpointError.
  static SafetensorsIndex open(const std::string& path);

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const Entry& at(const std::string& name) const;  // throws CheckpointError if absent
  const std::map<std::string, Entry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return meta_; }
  const std::string& path() const { return path_; }
  // Reads `count` elements of `name` from element `first` as stored (raw bytes).
  void read_raw(const std::string& name, int64_t first, int64_t count, void* dst) const;

 private:
  std::string path_;
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::string> meta_;
};

// Bytes per element of a safetensors dtype name; 0 when unknown.
size_t safetensors_dtype_size(const std::string& dtype);

// Throws CheckpointError; `each_mib`, when set, is called before every MiB
// read (a stop check that throws ends a long checksum).
uint32_t crc32_of_file(const std::string& path, const std::function<void()>& each_mib = {});
void fsync_path(const std::string& path);         // file or directory

}  // namespace weft
