#include "train/output_dirs.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <thread>

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

int checkpoints_to_write(int64_t start_step, int64_t steps, int every) {
  if (steps <= start_step) return 0;
  // Multiples of `every` in (start_step, steps), then the last step's.
  const int64_t periodic = every > 0 ? (steps - 1) / every - start_step / every : 0;
  return static_cast<int>(std::min<int64_t>(periodic + 1, 1 << 30));
}

int peak_checkpoints(int keep, int existing, int to_write) {
  if (to_write <= 0) return existing;
  const int kept = std::max(keep, 1);
  // Before the k-th write the directory holds what it had (k = 1) or
  // min(kept, existing + k - 1) (k > 1, after a publish pruned it).
  const int64_t before_last = std::min<int64_t>(kept, static_cast<int64_t>(existing) + to_write - 1);
  return static_cast<int>(std::max<int64_t>(existing, before_last) + 1);
}

void require_free_space(const std::string& dir, int64_t one_checkpoint, int keep, int existing, int to_write,
                        const std::string& what) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return;  // unknown: the writes themselves will tell
  const int64_t free_bytes = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
  const int peak = peak_checkpoints(keep, existing, to_write);
  const int more = peak - existing;
  if (more <= 0) return;
  const int64_t need_bytes = one_checkpoint * more;
  if (free_bytes < need_bytes)
    throw CheckpointError(fmt::format(
        "{} {}: {} free, but {} more checkpoint{} of this model need{} about {} ({} each; at most {} at once: "
        "checkpoint.keep {} of the {} this run writes, and the one being written, {} there now); free space "
        "there, lower checkpoint.keep, or point {} at a larger volume",
        what, dir, mib(free_bytes), more, more == 1 ? "" : "s", more == 1 ? "s" : "", mib(need_bytes),
        mib(one_checkpoint), peak, keep, to_write, existing, what));
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

// ---- held directories ----

namespace {

constexpr const char* kLockName = ".weft.lock";

// What `fd`'s file holds (the holder's text), at most 1 KiB.
std::string read_fd_text(int fd) {
  char buf[1024];
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  std::string t = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  while (!t.empty() && (t.back() == '\n' || t.back() == '\0')) t.pop_back();
  return t;
}

}  // namespace

std::string lock_holder_text(const std::string& job) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("pid {} on {} since {} UTC{}", ::getpid(), host, when, job.empty() ? "" : ", " + job);
}

DirLock::DirLock(const std::string& dir, const std::string& what, const std::string& holder,
                 std::chrono::milliseconds wait) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string path = (fs::path(dir) / kLockName).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw CheckpointError(fmt::format("{} {}: cannot create {}: {}", what, dir, path, std::strerror(errno)));
  const auto until = std::chrono::steady_clock::now() + wait;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      const int err = errno;
      ::close(fd_);
      throw CheckpointError(fmt::format("{} {}: cannot lock {}: {}", what, dir, path, std::strerror(err)));
    }
    if (std::chrono::steady_clock::now() >= until) {
      const std::string by = read_fd_text(fd_);
      ::close(fd_);
      throw DirLockHeld(fmt::format(
          "{} {} is in use by another run ({}): two runs writing one directory remove each other's staging and "
          "overwrite each other's files; stop that run, or give this one its own {}",
          what, dir, by.empty() ? "its holder did not say who it is" : by, what));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Should the text not be written, the lock still holds: only the holder's
  // name is lost.
  const std::string text = holder + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    const ssize_t written = ::pwrite(fd_, text.data(), text.size(), 0);
    (void)written;
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);
}

HeldScratch::HeldScratch(const std::string& path) : path_(path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  fs::create_directories(path, ec);
  if (ec) throw CheckpointError(fmt::format("{}: cannot create it: {}", path, ec.message()));
  fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0 || ::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (fd_ >= 0) ::close(fd_);
    throw CheckpointError(fmt::format("{}: cannot hold it: {}", path, std::strerror(err)));
  }
}

HeldScratch::~HeldScratch() {
  if (fd_ >= 0) ::close(fd_);
}

StaleTemporaries remove_abandoned_scratch(const std::string& parent, const std::string& prefix) {
  StaleTemporaries r;
  std::error_code ec;
  if (prefix.empty() || !fs::is_directory(parent, ec)) return r;
  const std::time_t now = std::time(nullptr);
  for (const fs::directory_entry& e : fs::directory_iterator(parent, ec)) {
    if (e.path().filename().string().rfind(prefix, 0) != 0) continue;
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0 || now - st.st_mtime < 5) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    const bool abandoned = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (abandoned) {
      const int64_t bytes = bytes_under(e.path());
      std::error_code rm;
      fs::remove_all(e.path(), rm);
      if (!rm) {
        ++r.removed;
        r.bytes += bytes;
      }
    }
    ::close(fd);
  }
  return r;
}

}  // namespace weft
