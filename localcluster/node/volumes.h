// Volume contents on disk, the way the kubelet lays them out: a ConfigMap or
// Secret volume is a directory whose visible files are symlinks into `..data`,
// itself a symlink to a timestamped directory; an update writes a new
// directory and renames `..data` over the old link, so a reader inside the pod
// sees either the old or the new set of files, never a mix.
#pragma once

#include <map>
#include <string>

namespace weft::node {

// Writes `files` (relative path -> bytes) into `dir` atomically as above;
// `mode` is applied to every file. Returns "" or an error naming the path.
std::string write_atomic_dir(const std::string& dir, const std::map<std::string, std::string>& files, int mode);

// Rewrites `path` in place (same inode: a bind mount of it stays valid),
// only when its content differs. Returns "" or an error.
std::string rewrite_in_place(const std::string& path, const std::string& content);

// mkdir -p; "" or an error.
std::string make_dirs(const std::string& path, int mode = 0755);

// Reads a whole file; false when it cannot be opened.
bool read_file(const std::string& path, std::string* out);

// The last `max_lines` lines of a file, at most `max_bytes` (termination
// messages taken from logs).
std::string tail_of_file(const std::string& path, int max_lines, size_t max_bytes);

}  // namespace weft::node
