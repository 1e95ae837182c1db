#include "small_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace weft {
namespace {

std::string kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "of an unknown kind";
}

}  // namespace

std::string not_regular_file(unsigned mode) { return "not a regular file (" + kind_of(mode) + ")"; }

std::string irregular_file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  return path + ": " + not_regular_file(st.st_mode);
}

SmallFile read_small_file(const std::string& path, uint64_t max_bytes) {
  SmallFile f;
  auto refuse = [&](const std::string& why) {
    f.status = SmallFile::Status::Refused;
    f.problem = path + ": " + why;
    return f;
  };
  // O_NONBLOCK: opening a FIFO for reading returns at once instead of
  // waiting for a writer; the descriptor's own type is checked below, so a
  // path swapped after a stat cannot slip through.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return f;
    return refuse(std::string("cannot open (") + std::strerror(errno) + ")");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string why = S_ISREG(st.st_mode) ? std::string("cannot stat (") + std::strerror(errno) + ")"
                                                : not_regular_file(st.st_mode);
    ::close(fd);
    return refuse(why);
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return refuse(std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes) +
                  " such a file may have");
  }
  // Read to the end, but never more than one byte past the bound: a file
  // growing while it is read is refused like a large one.
  f.text.reserve(static_cast<size_t>(st.st_size));
  char buf[65536];
  while (f.text.size() <= max_bytes) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::string("cannot read (") + std::strerror(errno) + ")";
      ::close(fd);
      return refuse(why);
    }
    if (n == 0) break;
    f.text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (f.text.size() > max_bytes)
    return refuse("grew past the " + std::to_string(max_bytes) + " bytes such a file may have while it was read");
  f.status = SmallFile::Status::Read;
  return f;
}

}  // namespace weft
