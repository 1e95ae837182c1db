// The free-space check's arithmetic (train/output_dirs.h): how many
// checkpoints a run writes, and how many its directory holds at once.
#include <gtest/gtest.h>

#include "train/output_dirs.h"

namespace weft {
namespace {

TEST(CheckpointSpace, CheckpointsToWriteCountsPeriodicAndTheLast) {
  EXPECT_EQ(checkpoints_to_write(0, 2, 1), 2);    // step 1, step 2 (the last)
  EXPECT_EQ(checkpoints_to_write(0, 40, 0), 1);   // only the last
  EXPECT_EQ(checkpoints_to_write(0, 12, 4), 3);   // 4, 8, 12
  EXPECT_EQ(checkpoints_to_write(0, 13, 4), 4);   // 4, 8, 12, 13
  EXPECT_EQ(checkpoints_to_write(8, 12, 4), 1);   // resumed at 8: 12
  EXPECT_EQ(checkpoints_to_write(9, 13, 4), 2);   // 12, 13
  EXPECT_EQ(checkpoints_to_write(12, 12, 4), 0);  // nothing left
  EXPECT_EQ(checkpoints_to_write(20, 12, 4), 0);
}

TEST(CheckpointSpace, PeakIsTheKeptOnesTheRunCanFillAndTheOneBeingWritten) {
  // keep, existing, to_write -> most checkpoints in the directory at once
  EXPECT_EQ(peak_checkpoints(2, 0, 2), 2);
  EXPECT_EQ(peak_checkpoints(10, 0, 2), 2);   // keep is a cap, not what is written
  EXPECT_EQ(peak_checkpoints(3, 0, 4), 4);
  EXPECT_EQ(peak_checkpoints(3, 0, 100), 4);
  EXPECT_EQ(peak_checkpoints(1, 0, 4), 2);
  EXPECT_EQ(peak_checkpoints(0, 0, 4), 2);    // keep 0 keeps the newest
  EXPECT_EQ(peak_checkpoints(3, 2, 1), 3);    // two there, one more written
  EXPECT_EQ(peak_checkpoints(3, 3, 5), 4);
  EXPECT_EQ(peak_checkpoints(2, 5, 3), 6);    // five left by a larger keep: pruned only after the first write
  EXPECT_EQ(peak_checkpoints(3, 2, 0), 2);    // nothing to write
}

}  // namespace
}  // namespace weft
