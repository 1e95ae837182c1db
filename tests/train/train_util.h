// Shared helpers of the trainer tests: small configs and scratch directories.
#pragma once

#include <filesystem>
#include <string>

#include "train/config.h"

namespace weft::testing {

// A model small enough that a 20-step run takes well under a second.
WorkerConfig small_config(const std::string& out_dir);

// A fresh empty directory under the system temp dir, removed by the caller.
std::filesystem::path scratch_dir(const std::string& tag);

}  // namespace weft::testing
