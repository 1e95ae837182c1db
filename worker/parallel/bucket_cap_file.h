// Watches the file through which the tuner asks for a new bucket cap (a
// ConfigMap key mounted into every pod). Only rank 0 polls it; the value
// reaches the other ranks through DataParallel's step agreement.
#pragma once

#include <optional>
#include <string>

namespace weft {

class BucketCapFile {
 public:
  explicit BucketCapFile(std::string path) : path_(std::move(path)) {}

  // The cap in MiB if the file's value changed since the last call (the first
  // call reports the current value). A missing file is not an error (the
  // ConfigMap may not have the key yet); unparsable or non-positive content is
  // logged once per distinct content and ignored.
  std::optional<double> poll();

 private:
  std::string path_;
  std::string last_text_;
  bool have_last_ = false;
};

}  // namespace weft
