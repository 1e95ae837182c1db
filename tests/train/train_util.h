// Shared helpers of the trainer tests (scratch directories: support/run_process.h).
#pragma once

#include <filesystem>
#include <string>

#include "support/run_process.h"
#include "config/config.h"

namespace weft::testing {

// A model small enough that a 20-step run takes well under a second.
WorkerConfig small_config(const std::string& out_dir);

}  // namespace weft::testing
