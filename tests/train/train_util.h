// Shared helpers of the trainer tests (scratch directories: support/run_process.h).
#pragma once

#include <filesystem>
#include <string>

#include "support/run_process.h"
#include "config/config.h"
#include "train/trainer.h"

namespace weft::testing {

// A model small enough that a 20-step run takes well under a second.
WorkerConfig small_config(const std::string& out_dir);

// Removes every checkpoint under `ckpt_dir` but `name` (e.g. "step-8") and
// points `latest` at it, as if the run had died right after writing it.
void keep_only_checkpoint(const std::string& ckpt_dir, const std::string& name);

// As if `part` had died right after its step-`k` checkpoint: keeps only that
// one, runs `part` again and expects it to resume there and reproduce `ref`'s
// losses from step k+1 on, bit for bit.
void expect_exact_resume(const WorkerConfig& part, const TrainSummary& ref, int k);

}  // namespace weft::testing
