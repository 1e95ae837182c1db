#include "comm/communicator.h"

namespace weft::comm {

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : "avg"; }

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::AllGather: return "all_gather";
    case OpKind::AllToAll: return "all_to_all";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Barrier: return "barrier";
  }
  return "?";
}

void StatsRecorder::add(OpKind op, double seconds, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  CommOpStats& s = stats_.by_op[op_name(op)];
  s.count += 1;
  s.seconds += seconds;
  s.bytes += bytes;
}

CommStats StatsRecorder::snapshot() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

std::vector<int64_t> split_counts(const std::string& group, OpKind op, int64_t total, int size,
                                  const std::vector<int64_t>& counts) {
  std::string where = std::string(op_name(op)) + " on group " + group + ": ";
  if (counts.empty()) {
    if (total % size != 0)
      throw CommError(where + std::to_string(total) + " elements do not split evenly over " +
                      std::to_string(size) + " ranks; pass explicit counts");
    return std::vector<int64_t>(size, total / size);
  }
  if (static_cast<int>(counts.size()) != size)
    throw CommError(where + "got " + std::to_string(counts.size()) + " counts for " +
                    std::to_string(size) + " ranks");
  int64_t sum = 0;
  for (int64_t c : counts) {
    if (c < 0) throw CommError(where + "negative count " + std::to_string(c));
    sum += c;
  }
  if (sum != total)
    throw CommError(where + "counts sum to " + std::to_string(sum) + " but the buffer holds " +
                    std::to_string(total) + " elements");
  return counts;
}

void check_buffer(const std::string& group, OpKind op, const char* which, const Tensor& t) {
  std::string where = std::string(op_name(op)) + " on group " + group + ": " + which + " ";
  if (t.dtype != DType::F32 && t.dtype != DType::BF16)
    throw CommError(where + "has dtype " + dtype_name(t.dtype) + "; only f32 and bf16 are supported");
  if (t.numel() > 0 && t.data == nullptr) throw CommError(where + "has no data");
}

void check_buffer_on(const std::string& group, OpKind op, const char* which, const Tensor& t, Device device,
                     const char* rule) {
  check_buffer(group, op, which, t);
  if (t.device != device)
    throw CommError(std::string(op_name(op)) + " on group " + group + ": " + which + " is a " +
                    (t.device == Device::CUDA ? "CUDA" : "CPU") + " tensor; " + rule);
}

char* element_at(const Tensor& t, int64_t elem) {
  return static_cast<char*>(t.data) + elem * static_cast<int64_t>(dtype_size(t.dtype));
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> off(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i];
  return off;
}

}  // namespace weft::comm
