#include "train/output_dirs.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "train/safetensors.h"

namespace fs = std::filesystem;

namespace weft {

namespace {

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

int64_t bytes_under(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_directory(p, ec)) {
    const auto n = fs::file_size(p, ec);
    return ec ? 0 : static_cast<int64_t>(n);
  }
  int64_t total = 0;
  for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code e2;
    if (it->is_regular_file(e2)) {
      const auto n = it->file_size(e2);
      if (!e2) total += static_cast<int64_t>(n);
    }
  }
  return total;
}

}  // namespace

void require_writable_dir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CheckpointError(fmt::format("{} {}: cannot create it: {}", what, dir, ec.message()));
  if (!fs::is_directory(dir, ec))
    throw CheckpointError(fmt::format("{} {}: exists but is not a directory", what, dir));
  const std::string probe = (fs::path(dir) / fmt::format(".weft-write-probe-{}", ::getpid())).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw CheckpointError(fmt::format("{} {}: not writable: {}", what, dir, std::strerror(errno)));
  const char byte = 0;
  const bool ok = ::write(fd, &byte, 1) == 1 && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!ok) throw CheckpointError(fmt::format("{} {}: a test write failed: {}", what, dir, std::strerror(err)));
}

void require_free_space(const std::string& dir, int64_t one_checkpoint, int keep, int existing,
                        const std::string& what) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return;  // unknown: the writes themselves will tell
  const int64_t free_bytes = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
  // At the peak the directory holds `keep` checkpoints and the new one.
  const int more = std::max(1, std::max(keep, 1) + 1 - existing);
  const int64_t need_bytes = one_checkpoint * more;
  if (free_bytes < need_bytes)
    throw CheckpointError(fmt::format(
        "{} {}: {} free, but {} more checkpoint{} of this model need about {} ({} each; checkpoint.keep {} "
        "and the one being written, {} there now); free space there, lower checkpoint.keep, or point {} at a "
        "larger volume",
        what, dir, mib(free_bytes), more, more == 1 ? "" : "s", mib(need_bytes), mib(one_checkpoint), keep,
        existing, what));
}

std::string checkpoint_dir(const WorkerConfig& cfg) {
  return cfg.checkpoint.dir.empty() ? cfg.train.out_dir + "/checkpoints" : cfg.checkpoint.dir;
}

int64_t checkpoint_bytes_estimate(int64_t num_params) {
  // model.safetensors (f32) + exp_avg + exp_avg_sq (f32), and 64 KiB of
  // headers, config and metadata.
  return num_params * 3 * static_cast<int64_t>(sizeof(float)) + 64 * 1024;
}

StaleTemporaries remove_stale_temporaries(const std::string& dir) {
  StaleTemporaries r;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return r;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool tmp_dir = name.rfind(".tmp-", 0) == 0;
    const bool tmp_file = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
    if (!tmp_dir && !tmp_file) continue;
    const int64_t bytes = bytes_under(e.path());
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (rm) continue;  // someone else's, or read-only: leave it
    ++r.removed;
    r.bytes += bytes;
  }
  return r;
}

}  // namespace weft
