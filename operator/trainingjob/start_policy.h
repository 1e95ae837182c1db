// Start policy (pure): the pods of an attempt that are on their node but
// whose worker container has not started (phase Pending, the container
// waiting or not yet reported by the kubelet), and what to do about them.
//
//  - A waiting reason a gang restart cannot cure (the image is not on the
//    node and may not be pulled, cannot be pulled, is not a valid name; the
//    container's config names a Secret or ConfigMap key that is not there;
//    the runtime cannot create or start the container) blocks the start:
//    the job stays Pending, Ready False with a reason naming the cause
//    (start_blocker) and a message naming the pod and the kubelet's words.
//    The kubelet keeps trying on its own (an image loaded onto the node, a
//    Secret created, the registry back) and the pod starts once it can. When
//    the start deadline passes first, the job fails with that reason. No
//    gang restart is counted: the same pods would meet the same cause.
//  - Any other wait (ContainerCreating: the image still pulling, volumes
//    not mounted, no pod network; PodInitializing; no container status at
//    all) past the start deadline restarts the gang, counted against
//    maxRestarts (FailureCause StartTimeout, reason RankStartTimeout): the
//    cause may be the node's, and the new pods may land elsewhere.
//  - The deadline (--pod-start-timeout-seconds, 0 = none) counts from when
//    the pod was bound to its node (PodScheduled's lastTransitionTime; its
//    creation when that is not known): the time a pod waits for a place is
//    the scheduler's, see scheduling_policy.h and elastic_policy.h.
// A pod past its deadline for a blocking cause fails the job before one past
// it for another restarts the gang; otherwise the lowest rank's pod decides.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "trainingjob/clock.h"
#include "trainingjob/gang.h"
#include "trainingjob/restart_policy.h"
#include "trainingjob/types.h"

namespace weft::tj {

// The condition reason (constants.h) of a kubelet waiting reason a restart
// cannot cure: ImageNotPresent (ErrImageNeverPull), ImagePullFailed
// (ErrImagePull, ImagePullBackOff, ImageInspectError, ...), InvalidImageName,
// ContainerConfigError (CreateContainerConfigError), ContainerCreateFailed
// (CreateContainerError, RunContainerError, the hook errors); "" otherwise.
std::string start_blocker(const std::string& waiting_reason);

struct StartDecision {
  // Fail or Restart once a deadline passed (restart_gang and fail_gang carry
  // it out like the restart policy's); Healthy otherwise.
  RestartDecision act;
  // Pods blocked from starting (before the deadline): Ready False with this
  // reason and message; empty reason when none is.
  std::string blocked_reason, blocked_message;
  // When the earliest deadline of a waiting pod passes, if one waits.
  std::optional<std::chrono::milliseconds> recheck_in;
};

// `timeout` 0: no deadline (blocked pods are still reported).
StartDecision decide_start(const GangObservation& gang, TimePoint now, std::chrono::seconds timeout,
                           int counted_restarts, const RestartSpec& spec);

}  // namespace weft::tj
