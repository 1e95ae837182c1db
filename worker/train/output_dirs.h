// Start-up checks of the directories a run writes to, so a directory that
// cannot take a checkpoint fails the run before its first step instead of at
// the first checkpoint (with checkpoint.every 0: after the whole run), and the
// leftovers of interrupted checkpoint writes do not pile up on the volume
// across restarts.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
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

// ---- Held directories: flock(2), released however the process ends ----
// Pids cannot tell a live holder from a dead one here (a container's process
// is often pid 1 every time); a lock the kernel drops with the process can.

// A run's hold on a directory it writes (train.out_dir, checkpoint.dir): an
// exclusive flock of DIR/.weft.lock, whose text names the holder. Two runs
// started into one directory would remove each other's staging at start-up
// and overwrite each other's files: the second is refused.
class DirLock {
 public:
  // Creates `dir` if needed and takes its lock, waiting up to `wait` for a
  // holder to let go. Throws DirLockHeld naming `what`, the directory and the
  // holder (its text, `holder` of the run that holds it), CheckpointError
  // when the lock file cannot be made.
  DirLock(const std::string& dir, const std::string& what, const std::string& holder,
          std::chrono::milliseconds wait = std::chrono::milliseconds(0));
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

struct DirLockHeld : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Who this process is, for DirLock's text: "pid P on HOST since TIME UTC",
// and the job when `job` is not empty.
std::string lock_holder_text(const std::string& job);

// A scratch directory of this process (--eval's assembled model,
// --export-hf's OUT.tmp-PID): created empty at `path` and flocked on itself
// while this object lives. Not removed here: the owner removes or renames it.
class HeldScratch {
 public:
  explicit HeldScratch(const std::string& path);  // throws CheckpointError
  ~HeldScratch();
  HeldScratch(const HeldScratch&) = delete;
  HeldScratch& operator=(const HeldScratch&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// Removes the entries of `parent` whose names start with `prefix` that no
// live process holds (HeldScratch): what a SIGKILLed --eval or --export-hf
// left. One made in the last few seconds is left alone (its maker may not
// have locked it yet).
StaleTemporaries remove_abandoned_scratch(const std::string& parent, const std::string& prefix);

}  // namespace weft
