#include "trainingjob/ttl_policy.h"

#include "trainingjob/constants.h"

namespace weft::tj {

std::optional<std::chrono::seconds> ttl_remaining(const TrainingJobSpec& spec, const TrainingJobStatus& status,
                                                  TimePoint now) {
  if (!spec.ttl_seconds_after_finished) return std::nullopt;
  if (status.phase != kPhaseSucceeded && status.phase != kPhaseFailed) return std::nullopt;
  auto done = parse_time(status.completion_time);
  if (!done) return std::chrono::seconds(0);  // finished without a time: treat as long ago
  auto deadline = *done + std::chrono::seconds(*spec.ttl_seconds_after_finished);
  return std::chrono::duration_cast<std::chrono::seconds>(deadline - now);
}

}  // namespace weft::tj
