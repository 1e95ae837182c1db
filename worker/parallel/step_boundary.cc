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

bool StepBoundary::any_stop(bool stop_requested) {
  if (!group_) return stop_requested;
  float flag = stop_requested ? 1.0f : 0.0f;
  all_reduce_host(*group_, device_, &flag, 1, comm::ReduceOp::Sum, "stop agreement")->wait();
  return flag > 0;
}

std::vector<StartPoint> StepBoundary::start_points(const StartPoint& mine) {
  if (!group_) return {mine};
  // An all-gather through the host-scalar all-reduce: each rank fills its
  // own slots of a zeroed table, the sum is everyone's. Values travel as
  // 16-bit pieces, which a float holds exactly: 48 bits of step, 32 of id.
  constexpr int kSlots = 5;
  const int n = group_->size();
  std::vector<float> table(static_cast<size_t>(n) * kSlots, 0.0f);
  float* own = table.data() + static_cast<size_t>(group_->rank()) * kSlots;
  const uint64_t step = static_cast<uint64_t>(mine.step);
  for (int i = 0; i < 3; ++i) own[i] = static_cast<float>((step >> (16 * i)) & 0xffff);
  for (int i = 0; i < 2; ++i) own[3 + i] = static_cast<float>((mine.checkpoint >> (16 * i)) & 0xffff);
  all_reduce_host(*group_, device_, table.data(), static_cast<int>(table.size()), comm::ReduceOp::Sum,
                  "start agreement")
      ->wait();
  std::vector<StartPoint> all(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const float* v = table.data() + static_cast<size_t>(r) * kSlots;
    uint64_t st = 0;
    for (int i = 0; i < 3; ++i) st |= static_cast<uint64_t>(v[i]) << (16 * i);
    all[r].step = static_cast<int64_t>(st);
    all[r].checkpoint = static_cast<uint32_t>(v[3]) | (static_cast<uint32_t>(v[4]) << 16);
  }
  return all;
}

}  // namespace weft
