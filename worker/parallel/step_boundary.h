// StepBoundary: what the ranks agree on before each optimizer step. A stop
// request (SIGTERM on any rank) must stop every rank at the same step, or the
// others would wait forever in the next collective; a new bucket cap from the
// tuner must take effect at the same step on every rank, or buckets would
// not match.
//
// Owns the bucket-cap file (the tuner's ConfigMap key mounted in the pod):
// rank 0 polls it; the value reaches the others through the agreement.
// One tiny all-reduce per step over the group; none when training alone.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "parallel/bucket_cap_file.h"

namespace weft {

// Where a rank starts: the step it resumes at and the identity of the
// checkpoint it loaded (0 and 0 for a fresh start).
struct StartPoint {
  int64_t step = 0;
  uint32_t checkpoint = 0;
  bool operator==(const StartPoint&) const = default;
};

struct StepAgreement {
  bool stop = false;   // some rank was asked to stop: all stop here
  double new_cap_mb = 0;  // > 0: every rank switches to this bucket cap now
};

class StepBoundary {
 public:
  // group nullptr or of size 1: alone (no collective, no cap file).
  // cap_file: the path rank 0 polls, empty for none. device: where the
  // group's collectives take their tensors (parallel/host_scalars.h).
  StepBoundary(comm::CommunicatorPtr group, const std::string& cap_file, Device device = Device::CPU);

  // Collective over the group: every rank calls it once before each step.
  // current_cap_mb is the cap in force; an equal request is no change.
  StepAgreement agree(bool stop_requested, double current_cap_mb);
  // Collective over the group, inside a long phase that every rank runs in
  // step (the batches of an evaluation, the micro-batches of a step): true
  // when any rank was asked to stop, so that all leave it at the same point.
  // Alone: `stop_requested`.
  bool any_stop(bool stop_requested);
  // Collective over the group, once before the first step: every rank's
  // start point, in group rank order (alone: just `mine`). Ranks that load
  // different checkpoints (one node's disk against another's, a stale
  // volume) would otherwise train in lock-step from different steps.
  std::vector<StartPoint> start_points(const StartPoint& mine);
  // Cap-file contents rank 0 rejected so far (0 on other ranks).
  int64_t rejected_caps() const { return cap_file_ ? cap_file_->rejected() : 0; }

 private:
  comm::CommunicatorPtr group_;
  Device device_;
  std::optional<BucketCapFile> cap_file_;
};

}  // namespace weft
