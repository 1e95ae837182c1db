#include "train/content_identity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <set>

#include "data/sample_order.h"
#include "small_file.h"
#include "train/safetensors.h"

namespace weft {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
// A files list longer than this is shown as its ends and a hash of it.
constexpr size_t kNamesListed = 8;

struct Fnv1a {
  uint64_t h = 14695981039346656037ull;
  void add(const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 1099511628211ull;
    }
  }
  void add(uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    add(b, 8);
  }
};

std::string errno_text() { return std::strerror(errno); }

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads [at, at + n) into buf (resized to n); false with errno set on a
// failed or short read (a file that shrank meanwhile).
bool read_range(int fd, uint64_t at, uint64_t n, std::vector<unsigned char>& buf) {
  buf.resize(n);
  uint64_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, buf.data() + done, n - done, static_cast<off_t>(at + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got == 0) errno = EIO;
      return false;
    }
    done += static_cast<uint64_t>(got);
  }
  return true;
}

// The byte ranges of a large file that are hashed, in a fixed order: the
// head (and a safetensors header whole, with its length prefix), each
// tensor's first and last block, then the strided blocks.
std::vector<std::pair<uint64_t, uint64_t>> sampled_ranges(int fd, uint64_t size, bool safetensors,
                                                          const ContentSampling& s) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  const uint64_t block = std::min(s.block_bytes, size);
  uint64_t head = std::min(s.head_bytes, size);
  std::vector<unsigned char> buf;
  if (safetensors && size >= 8 && read_range(fd, 0, 8, buf)) {
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t{buf[i]} << (8 * i);
    if (n <= kMaxSafetensorsHeaderBytes && 8 + n <= size && read_range(fd, 8, n, buf)) {
      head = std::max(head, 8 + n);
      try {
        const nlohmann::json j = nlohmann::json::parse(buf.begin(), buf.end());
        for (auto it = j.begin(); j.is_object() && it != j.end(); ++it) {
          if (it.key() == "__metadata__" || !it->is_object() || !it->contains("data_offsets")) continue;
          const auto& off = (*it)["data_offsets"];
          if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
            continue;
          const uint64_t begin = 8 + n + off[0].get<uint64_t>(), end = 8 + n + off[1].get<uint64_t>();
          if (begin >= end || end > size) continue;  // the loader names what is wrong
          ranges.emplace_back(begin, std::min(block, end - begin));
          ranges.emplace_back(end - std::min(block, end - begin), std::min(block, end - begin));
        }
      } catch (const nlohmann::json::exception&) {
        // Not a header the loader accepts either; its bytes are hashed.
      }
    }
  }
  ranges.insert(ranges.begin(), {0, head});
  const int k = std::max(1, s.strided_blocks);
  for (int i = 0; i < k; ++i)  // the last ends at the file's last byte
    ranges.emplace_back(k == 1 ? size - block
                               : static_cast<uint64_t>(static_cast<unsigned __int128>(size - block) * i / (k - 1)),
                        block);
  return ranges;
}

// '%', '=' and newlines %-escaped: a name becomes part of a "path=value" line.
std::string escaped(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '%' || c == '=' || c == '\n' || c == '\r')
      out += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    else
      out += c;
  }
  return out;
}

std::string names_text(const std::vector<std::string>& names) {
  std::string list;
  if (names.size() <= kNamesListed) {
    for (size_t i = 0; i < names.size(); ++i) list += (i ? ", " : "") + escaped(names[i]);
    return list;
  }
  Fnv1a h;
  for (const std::string& n : names) {
    h.add(reinterpret_cast<const unsigned char*>(n.data()), n.size());
    h.add(uint64_t{0});
  }
  return fmt::format("{} files, {} to {}, names {:016x}", names.size(), escaped(names.front()),
                     escaped(names.back()), h.h);
}

// The files of an HF directory that weft reads: config.json, then the single
// weights file, or the index and the shards it names (in name order).
std::vector<std::string> init_from_files(const std::string& dir) {
  std::vector<std::string> files{"config.json"};
  const fs::path index = fs::path(dir) / kIndexFile;
  std::error_code ec;
  if (!fs::exists(index, ec)) {
    files.push_back(kSingleFile);
    return files;
  }
  files.push_back(kIndexFile);
  const SmallFile f = read_small_file(index.string(), kMaxTextFileBytes);
  if (!f.ok()) return files;  // its identity says unreadable; the loader says why
  std::set<std::string> shards;
  try {
    const nlohmann::json j = nlohmann::json::parse(f.text);
    if (j.is_object() && j.contains("weight_map") && j["weight_map"].is_object())
      for (const auto& file : j["weight_map"])
        if (file.is_string()) shards.insert(file.get<std::string>());
  } catch (const nlohmann::json::exception&) {
    // Its bytes are still compared; the loader names what is wrong.
  }
  files.insert(files.end(), shards.begin(), shards.end());
  return files;
}

void add_files(const std::string& setting, const std::vector<std::string>& names, const fs::path& base,
               const ContentSampling& sampling, std::vector<std::pair<std::string, std::string>>& out) {
  out.emplace_back(setting + " files", names_text(names));
  for (const std::string& n : names)
    out.emplace_back(setting + " file " + escaped(n), file_identity((base / n).string(), sampling));
}

void add_glob(const std::string& setting, const std::string& glob, const ContentSampling& sampling,
              std::vector<std::pair<std::string, std::string>>& out) {
  std::vector<std::string> matches;
  try {
    matches = expand_glob(glob, setting);
  } catch (const std::exception&) {
    // No match on every rank is refused by the data source, as before; on
    // some ranks only, the empty list differs.
  }
  add_files(setting, matches, fs::path(), sampling, out);
}

}  // namespace

std::string file_identity(const std::string& path, const ContentSampling& sampling) {
  // Only regular files, opened without blocking (a FIFO would wait for a
  // writer).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "unreadable (" + errno_text() + ")";
  if (!S_ISREG(st.st_mode)) return "unreadable (" + not_regular_file(st.st_mode) + ")";
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) return "unreadable (" + errno_text() + ")";
  if (!S_ISREG(st.st_mode)) return "unreadable (" + not_regular_file(st.st_mode) + ")";
  const uint64_t size = static_cast<uint64_t>(st.st_size);

  Fnv1a h;
  h.add(size);
  std::vector<unsigned char> buf;
  if (size <= sampling.whole_file_bytes) {
    if (!read_range(fd.get(), 0, size, buf)) return "unreadable (" + errno_text() + ")";
    h.add(buf.data(), buf.size());
    return fmt::format("{} bytes, content {:016x}", size, h.h);
  }
  // Scattered small reads: readahead would read megabytes around each.
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_RANDOM);
  const bool safetensors = path.size() >= 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
  for (const auto& [at, n] : sampled_ranges(fd.get(), size, safetensors, sampling)) {
    if (!read_range(fd.get(), at, n, buf)) return "unreadable (" + errno_text() + ")";
    h.add(at);
    h.add(buf.data(), buf.size());
  }
  return fmt::format("{} bytes, sampled content {:016x}", size, h.h);
}

std::vector<std::pair<std::string, std::string>> content_identity(const WorkerConfig& cfg,
                                                                  const ContentSampling& sampling) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!cfg.init_from.empty()) add_files("init_from", init_from_files(cfg.init_from), cfg.init_from, sampling, out);
  if (cfg.data.source == DataSource::Shards) {
    add_glob("data.shards", cfg.data.shards, sampling, out);
    if (!cfg.eval.shards.empty()) add_glob("eval.shards", cfg.eval.shards, sampling, out);
  }
  return out;
}

}  // namespace weft
