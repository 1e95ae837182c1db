// TTL policy (pure): how long until a finished job is deleted.
// nullopt = never (no TTL set, or the job has not finished); zero or
// negative = delete now. Milliseconds, not seconds: truncating the remaining
// time to whole seconds deleted a job with a 2 s TTL within 100 ms of its
// completion. A finished job without a readable completionTime counts as
// finished now (the reconciler records that time), never as long ago.
#pragma once

#include <chrono>
#include <optional>

#include "trainingjob/clock.h"
#include "trainingjob/types.h"

namespace weft::tj {

std::optional<std::chrono::milliseconds> ttl_remaining(const TrainingJobSpec& spec, const TrainingJobStatus& status,
                                                       TimePoint now);

}  // namespace weft::tj
