// Canned worker expositions for the operator's tests, built from the metric
// names of contract/weft_metrics.h, so a test never spells a name the
// operator reads. defines: sample, rank0, rank_info_sample.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft_metrics.h"

namespace weft::testing {

namespace cm = contract::metrics;

// One line of the text format: `name{k="v",...} value\n`.
inline std::string sample(std::string_view name, const std::string& value,
                          const std::vector<std::pair<std::string, std::string>>& labels = {}) {
  std::string s(name);
  if (!labels.empty()) {
    s += '{';
    for (size_t i = 0; i < labels.size(); ++i)
      s += (i ? "," : "") + labels[i].first + "=\"" + labels[i].second + "\"";
    s += '}';
  }
  return s + " " + value + "\n";
}
inline std::string sample(const cm::Family& f, const std::string& value,
                          const std::vector<std::pair<std::string, std::string>>& labels = {}) {
  return sample(f.name, value, labels);
}

// The `rank` label the worker puts on every family.
inline std::vector<std::pair<std::string, std::string>> rank_label(int rank) {
  return {{cm::kLabelRank, std::to_string(rank)}};
}

// weft_rank_info = 1 for pod `pod`'s local rank 0 (rank == pod).
inline std::string rank_info_sample(const std::string& uid, int attempt, int pod) {
  return sample(cm::kRankInfo, "1",
                {{cm::kLabelInfoJobUid, uid},
                 {cm::kLabelInfoAttempt, std::to_string(attempt)},
                 {cm::kLabelInfoRank, std::to_string(pod)},
                 {cm::kLabelInfoNodeRank, std::to_string(pod)},
                 {cm::kLabelInfoLocalRank, "0"}});
}

}  // namespace weft::testing
