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

// Throws CheckpointError when the file system of `dir` has less free space
// for an unprivileged writer than the checkpoints of the run still need:
// `keep` of `one_checkpoint` bytes each and the one being written before
// the oldest is removed, less the `existing` ones already there (at least
// one more). Names the space, the need, checkpoint.keep and `what`.
void require_free_space(const std::string& dir, int64_t one_checkpoint, int keep, int existing,
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
