// The files a program opens by name: the worker's config, a checkpoint's
// meta.json and `latest`, an HF directory's config.json, index and weights,
// the bucket-cap file; the operator's and weft-node's kubeconfig, the
// certificates and token files it names, the in-cluster service-account
// files. Only regular files are read: opening a FIFO waits for a writer that
// may never come, and a device such as /dev/zero never ends, so either would
// hang a process (or fill its memory) where a stop signal cannot reach it.
// Small files are also bounded in size. Every refusal names the path and why.
//
// In contract/ because both sides read such files. Standard library and the
// POSIX calls open/fstat/read only (library weft_small_file).
#pragma once

#include <cstdint>
#include <string>

namespace weft {

// Why a file of st_mode `mode` is not read: "not a regular file (a FIFO)".
std::string not_regular_file(unsigned mode);

// Empty when `path` is a regular file or does not exist; otherwise why it
// cannot be read as one: "not a regular file (a FIFO)".
std::string irregular_file_problem(const std::string& path);

// Bounds: a config, meta.json, config.json, safetensors index or kubeconfig
// is text of at most a few MiB even for the largest models and clusters;
// `latest`, the bucket-cap file and a service-account token hold one line.
inline constexpr uint64_t kMaxTextFileBytes = 64ull << 20;
inline constexpr uint64_t kMaxLineFileBytes = 4096;

struct SmallFile {
  enum class Status { Read, Missing, Refused };
  Status status = Status::Missing;
  std::string text;     // Read: the whole file
  std::string problem;  // Refused: "<path>: not a regular file (a FIFO)", "<path>: 300000000 bytes, more than ..."
  bool ok() const { return status == Status::Read; }
};

// Reads `path` whole when it is a regular file of at most max_bytes; the
// open never blocks (a FIFO is refused without waiting for a writer).
SmallFile read_small_file(const std::string& path, uint64_t max_bytes);

}  // namespace weft
