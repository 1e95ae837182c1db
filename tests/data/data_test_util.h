// Helpers shared by the data tests.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "data/source.h"

namespace weft::testing_util {

// The DataError message `fn` throws, or "<no error>".
std::string data_error_of(const std::function<void()>& fn);

// N ranks with batch b see exactly the rows of one rank with batch N*b, for
// several (step, micro): the BatchIndex contract every source must keep.
void expect_rank_partition(const TokenSource& source, int T);

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace weft::testing_util
