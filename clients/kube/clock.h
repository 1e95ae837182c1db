// Wall-clock time as the API server writes it (RFC 3339, UTC). The reconciler
// takes "now" as a parameter so policies stay pure and tests control time.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace weft::kube {

using TimePoint = std::chrono::system_clock::time_point;

std::string format_time(TimePoint t);                        // 2026-01-02T03:04:05Z
std::string format_micro_time(TimePoint t);                  // 2026-01-02T03:04:05.123456Z (Lease)
std::optional<TimePoint> parse_time(const std::string& s);   // accepts both forms; nullopt if malformed

}  // namespace weft::kube
