#include "data/data_test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

namespace weft::testing_util {

std::string data_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const DataError& e) {
    return e.what();
  }
  return "<no error>";
}

void expect_rank_partition(const TokenSource& source, int T) {
  const int world = 4, b = 3, accum = 2;
  for (int64_t step : {0, 1, 5}) {
    for (int micro = 0; micro < accum; ++micro) {
      Batch whole;
      source.fill(whole, world * b, T, BatchIndex{step, micro, accum, 0, 1});
      for (int rank = 0; rank < world; ++rank) {
        Batch part;
        source.fill(part, b, T, BatchIndex{step, micro, accum, rank, world});
        const int64_t off = int64_t{rank} * b * T;
        EXPECT_TRUE(std::equal(part.inputs.begin(), part.inputs.end(), whole.inputs.begin() + off))
            << "inputs differ at step " << step << " micro " << micro << " rank " << rank;
        EXPECT_TRUE(
            std::equal(part.targets.begin(), part.targets.end(), whole.targets.begin() + off))
            << "targets differ at step " << step << " micro " << micro << " rank " << rank;
      }
    }
  }
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          ("weft-data-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace weft::testing_util
