// How the worker config shapes its process groups: the comm/parallel/device
// fields as comm::GroupOptions (comm/ itself does not read the config).
#pragma once

#include "comm/process_groups.h"
#include "config/config.h"

namespace weft {

comm::GroupOptions group_options(const WorkerConfig& cfg);

}  // namespace weft
