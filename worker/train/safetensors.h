// Reading and writing the safetensors format (8-byte little-endian header
// length, JSON header {name: {dtype, shape, data_offsets}, __metadata__}, then
// the raw tensor bytes), so checkpoints load in PyTorch and transformers.
// Readers validate everything they rely on and throw CheckpointError naming
// the file and the problem; they never trust sizes from the file.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace weft {

struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class SafetensorsWriter {
 public:
  // The data must stay alive until write() returns.
  void add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
           const void* data);
  void add(const std::string& name, const Tensor& t);
  void set_metadata(const std::string& key, const std::string& value) { meta_[key] = value; }
  // Writes and fsyncs path. Returns the CRC-32 (zlib) of the bytes written.
  uint32_t write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;
    size_t bytes;
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

uint32_t crc32_of_file(const std::string& path);  // throws CheckpointError
void fsync_path(const std::string& path);         // file or directory

}  // namespace weft
