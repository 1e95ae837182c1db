#include "comm/network_model.h"

#include <cmath>

namespace weft::comm {

std::chrono::nanoseconds NetworkModel::delay(OpKind op, uint64_t bytes, int group_size) const {
  if (!on() || group_size <= 1) return std::chrono::nanoseconds(0);
  const double p = group_size;
  const double tree = std::ceil(std::log2(p));
  double messages = 0, per_message = 0;
  switch (op) {
    case OpKind::AllReduce: messages = 2 * (p - 1), per_message = bytes / p; break;
    case OpKind::ReduceScatter:
    case OpKind::AllToAll: messages = p - 1, per_message = bytes / p; break;
    case OpKind::AllGather: messages = p - 1, per_message = static_cast<double>(bytes); break;  // input = one shard
    case OpKind::Broadcast: messages = tree, per_message = static_cast<double>(bytes); break;
    case OpKind::Barrier: messages = 2 * tree, per_message = 0; break;
  }
  const double transfer = bytes_per_second > 0 ? per_message / bytes_per_second : 0;
  return std::chrono::nanoseconds(static_cast<int64_t>(messages * (latency_s + transfer) * 1e9));
}

}  // namespace weft::comm
