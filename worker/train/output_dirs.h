// Start-up checks of the directories a run writes to, so a directory that
// cannot take a checkpoint fails the run before its first step instead of at
// the first checkpoint (with checkpoint.every 0: after the whole run), and the
// leftovers of interrupted checkpoint writes do not pile up on the volume
// across restarts.
#pragma once

#include <cstdint>
#include <string>

#include "config/config.h"

namespace weft {

// Where checkpoints go: checkpoint.dir, or <train.out_dir>/checkpoints.
std::string checkpoint_dir(const WorkerConfig& cfg);

// Creates `dir` if needed and proves it writable by creating, writing,
// syncing and removing a probe file. Throws CheckpointError naming `what`
// (e.g. "train.out_dir") and the directory.
void require_writable_dir(const std::string& dir, const std::string& what);

// How many checkpoints a run from `start_step` to `steps` writes: one at
// every multiple of `every` before the last step (every > 0), and one after
// the last step; none when no step is left.
int checkpoints_to_write(int64_t start_step, int64_t steps, int every);

// The most checkpoints `dir` holds at once while a run writes `to_write`
// more beside the `existing` ones: each is written beside what is there,
// and only once it is published are the ones beyond `keep` removed. So at
// most min(keep, existing + to_write - 1) kept ones and the one being
// written, and never fewer than what is there now plus that one.
int peak_checkpoints(int keep, int existing, int to_write);

// Throws CheckpointError when the file system of `dir` has less free space
// for an unprivileged writer than the run's checkpoints still need:
// (peak_checkpoints - existing) of `one_checkpoint` bytes each. Names the
// space, the need, checkpoint.keep, the checkpoints the run writes and
// `what`.
void require_free_space(const std::string& dir, int64_t one_checkpoint, int keep, int existing, int to_write,
                        const std::string& what);

// The bytes of one checkpoint of a model of `num_params` parameters: f32
// weights plus the two f32 AdamW moments over all shards, and a margin for
// the small files. An estimate for the free-space check, not a layout.
int64_t checkpoint_bytes_estimate(int64_t num_params);

struct StaleTemporaries {
  int removed = 0;        // directories and files removed
  int64_t bytes = 0;      // what they held
};
// Removes what interrupted checkpoint writes left in `dir`: directories named
// ".tmp-*" and files named "*.tmp". A complete checkpoint (step-N, `latest`)
// is never touched. Call it only where no writer of the same job can be
// running: on rank 0 at start-up, before the ranks form a gang that writes.
StaleTemporaries remove_stale_temporaries(const std::string& dir);

}  // namespace weft
