// Watches the file through which the tuner asks for a new bucket cap (a
// ConfigMap key mounted into every pod). Only rank 0 polls it; the value
// reaches the other ranks through DataParallel's step agreement.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace weft {

class BucketCapFile {
 public:
  explicit BucketCapFile(std::string path) : path_(std::move(path)) {}

  // The cap in MiB if the file's value changed since the last call (the first
  // call reports the current value). A missing file is not an error (the
  // ConfigMap may not have the key yet), nor is an empty one (no size asked
  // for: the operator's value for bucket_cap_mb auto); content that is not
  // one valid cap (contract::valid_bucket_cap_mb: a number of MiB in
  // (0, contract::kMaxBucketCapMb]) is rejected: logged and counted once per
  // distinct content, and the cap in force stays.
  std::optional<double> poll();
  // Distinct contents rejected so far.
  int64_t rejected() const { return rejected_; }

 private:
  std::string path_;
  std::string last_text_;
  bool have_last_ = false;
  int64_t rejected_ = 0;
};

}  // namespace weft
