// The controller's view of time is the API server's: RFC 3339 UTC strings
// (kube/clock.h). "now" is always a parameter, so policies stay pure.
#pragma once

#include "kube/clock.h"

namespace weft::tj {
using kube::format_micro_time;
using kube::format_time;
using kube::parse_time;
using kube::TimePoint;
}  // namespace weft::tj
