#include "node/volumes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace weft::node {
namespace fs = std::filesystem;

std::string make_dirs(const std::string& path, int mode) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return path + ": " + ec.message();
  ::chmod(path.c_str(), static_cast<mode_t>(mode));
  return "";
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

std::string write_atomic_dir(const std::string& dir, const std::map<std::string, std::string>& files, int mode) {
  static std::atomic<long> counter{0};
  if (auto err = make_dirs(dir, 0755); !err.empty()) return err;
  const auto stamp = std::chrono::system_clock::now().time_since_epoch() / std::chrono::microseconds(1);
  const std::string data_name = "..w" + std::to_string(stamp) + "_" + std::to_string(counter++);
  const fs::path data = fs::path(dir) / data_name;
  std::set<std::string> top;
  for (const auto& [rel, bytes] : files) {
    if (rel.empty() || rel[0] == '/' || rel.find("..") != std::string::npos) return dir + ": bad file name '" + rel + "'";
    const fs::path p = data / rel;
    if (auto err = make_dirs(p.parent_path().string(), 0755); !err.empty()) return err;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << bytes;
    if (!out) return p.string() + ": write failed";
    out.close();
    ::chmod(p.c_str(), static_cast<mode_t>(mode));
    top.insert(rel.substr(0, rel.find('/')));
  }
  if (files.empty()) make_dirs(data.string(), 0755);
  const fs::path tmp_link = fs::path(dir) / "..data_tmp";
  std::error_code ec;
  fs::remove(tmp_link, ec);
  if (::symlink(data_name.c_str(), tmp_link.c_str()) != 0) return tmp_link.string() + ": " + std::strerror(errno);
  if (::rename(tmp_link.c_str(), (fs::path(dir) / "..data").c_str()) != 0)
    return dir + "/..data: " + std::strerror(errno);
  // Visible names: a link per top-level entry; names no longer present go.
  for (const auto& name : top) {
    const fs::path link = fs::path(dir) / name;
    if (!fs::is_symlink(fs::symlink_status(link, ec)))
      if (::symlink(("..data/" + name).c_str(), link.c_str()) != 0 && errno != EEXIST)
        return link.string() + ": " + std::strerror(errno);
  }
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "..data" || name == data_name) continue;
    if (name.rfind("..", 0) == 0) fs::remove_all(entry.path(), ec);
    else if (!top.count(name) && fs::is_symlink(entry.symlink_status(ec))) fs::remove(entry.path(), ec);
  }
  return "";
}

std::string rewrite_in_place(const std::string& path, const std::string& content) {
  std::string old;
  if (read_file(path, &old) && old == content) return "";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return path + ": " + std::strerror(errno);
  // Write first, then trim: a concurrent reader sees the old or new text,
  // possibly followed by a stale tail, never an empty file.
  ssize_t n = ::pwrite(fd, content.data(), content.size(), 0);
  int rc = n == static_cast<ssize_t>(content.size()) ? ::ftruncate(fd, static_cast<off_t>(content.size())) : -1;
  ::close(fd);
  return rc == 0 ? "" : path + ": write failed";
}

std::string tail_of_file(const std::string& path, int max_lines, size_t max_bytes) {
  std::string all;
  if (!read_file(path, &all)) return "";
  if (all.size() > max_bytes) all = all.substr(all.size() - max_bytes);
  size_t pos = all.size();
  if (pos > 0 && all[pos - 1] == '\n') --pos;
  int lines = 0;
  while (pos > 0) {
    if (all[pos - 1] == '\n' && ++lines >= max_lines) break;
    --pos;
  }
  return all.substr(pos);
}

}  // namespace weft::node
