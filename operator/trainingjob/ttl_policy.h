// TTL policy (pure): how long until a finished job is deleted.
// nullopt = never (no TTL set, or the job has not finished); zero or
// negative = delete now.
#pragma once

#include <chrono>
#include <optional>

#include "trainingjob/clock.h"
#include "trainingjob/types.h"

namespace weft::tj {

std::optional<std::chrono::seconds> ttl_remaining(const TrainingJobSpec& spec, const TrainingJobStatus& status,
                                                  TimePoint now);

}  // namespace weft::tj
