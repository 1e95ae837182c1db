// How busy or slow the host running the tests is, so that a test's time
// limits stretch with it instead of failing on a slower CI host.
#pragma once

#include <chrono>

namespace weft::testing {

// How much slower this host is now than the one the tests' limits were set
// on: a fixed piece of CPU work (about 30 ms there, idle) timed once per
// process, best of three, as a factor from 1 to 10. A host where other
// tests train beside this one (CI runs the e2e suite in parallel) gets a
// larger factor. WEFT_TEST_TIME_SCALE (1 to 20) overrides the measurement.
double host_scale();

// d stretched by host_scale().
std::chrono::milliseconds scaled(std::chrono::milliseconds d);

}  // namespace weft::testing
