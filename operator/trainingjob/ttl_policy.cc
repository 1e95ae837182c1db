#include "trainingjob/ttl_policy.h"

#include "trainingjob/constants.h"

namespace weft::tj {

std::optional<std::chrono::milliseconds> ttl_remaining(const TrainingJobSpec& spec, const TrainingJobStatus& status,
                                                       TimePoint now) {
  if (!spec.ttl_seconds_after_finished) return std::nullopt;
  if (status.phase != kPhaseSucceeded && status.phase != kPhaseFailed) return std::nullopt;
  const auto ttl = std::chrono::seconds(*spec.ttl_seconds_after_finished);
  auto done = parse_time(status.completion_time);
  if (!done) return std::chrono::duration_cast<std::chrono::milliseconds>(ttl);  // finished now
  return std::chrono::duration_cast<std::chrono::milliseconds>(*done + ttl - now);
}

}  // namespace weft::tj
