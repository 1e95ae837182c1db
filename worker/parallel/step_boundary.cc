#include "parallel/step_boundary.h"

#include "parallel/host_scalars.h"

namespace weft {

StepBoundary::StepBoundary(comm::CommunicatorPtr group, const std::string& cap_file, Device device)
    : group_(group && group->size() > 1 ? std::move(group) : nullptr), device_(device) {
  if (group_ && group_->rank() == 0 && !cap_file.empty()) cap_file_.emplace(cap_file);
}

StepAgreement StepBoundary::agree(bool stop_requested, double current_cap_mb) {
  StepAgreement a;
  if (!group_) {
    a.stop = stop_requested;
    return a;
  }
  double requested = 0;
  if (cap_file_) {
    if (auto cap = cap_file_->poll()) requested = *cap;
  }
  // Sum over ranks of {stop, cap}: only rank 0 contributes a cap.
  float msg[2] = {stop_requested ? 1.0f : 0.0f, static_cast<float>(requested)};
  all_reduce_host(*group_, device_, msg, 2, comm::ReduceOp::Sum, "step agreement")->wait();
  a.stop = msg[0] > 0;
  // The cap travels as a float: compare at that precision, or a cap a float
  // cannot hold (0.1) would look changed on every poll of an unchanged file.
  const double cap = msg[1];
  if (cap > 0 && msg[1] != static_cast<float>(current_cap_mb)) a.new_cap_mb = cap;
  return a;
}

}  // namespace weft
