#include "comm/staged_communicator.h"

#include <algorithm>
#include <bit>
#include <cstdint>

namespace weft::comm {

// One staged collective: the fences of its copies and the Gloo collective,
// shared by its Work, its Gloo hooks and the pool slot it holds.
struct StagedCommunicator::Op : StagingPool::Owner {
  explicit Op(std::shared_ptr<StagingDevice> d) : device(std::move(d)) {}

  bool finished() override {
    std::lock_guard<std::mutex> lk(mu);
    if (refused) return !to_host || device->done(to_host);
    return host_work && host_work->completed() && (!back_fence || device->done(back_fence));
  }
  void set_back(StagingDevice::FencePtr f) {
    std::lock_guard<std::mutex> lk(mu);
    back_fence = std::move(f);
  }
  StagingDevice::FencePtr back() {
    std::lock_guard<std::mutex> lk(mu);
    return back_fence;
  }
  void set_host_work(WorkPtr w) {
    std::lock_guard<std::mutex> lk(mu);
    host_work = std::move(w);
  }

  const std::shared_ptr<StagingDevice> device;
  uintptr_t out_begin = 0, out_end = 0;      // the device memory its copy back writes
  StagingDevice::FencePtr to_host;           // set before the collective is issued
  std::vector<StagingDevice::Copy> copies_back;
  std::mutex mu;
  StagingDevice::FencePtr back_fence;        // set on the lane's thread
  WorkPtr host_work;
  bool refused = false;  // never issued (Gloo refused it, or staging failed)
};

namespace {

class StagedWork : public Work {
 public:
  explicit StagedWork(std::shared_ptr<StagedCommunicator::Op> op, WorkPtr host)
      : op_(std::move(op)), host_(std::move(host)) {}
  void wait() override {
    host_->wait();  // throws under FailurePolicy::Throw
    if (auto f = op_->back()) op_->device->compute_waits(f);
  }
  bool completed() override { return op_->finished(); }
  double comm_seconds() override { return host_->comm_seconds(); }
  double enqueue_to_start_seconds() override { return host_->enqueue_to_start_seconds(); }

 private:
  std::shared_ptr<StagedCommunicator::Op> op_;
  WorkPtr host_;
};

constexpr size_t kMinSlotBytes = size_t{64} << 10;

}  // namespace

// ------------------------------------------------------------------ pool --

char* StagingPool::take(size_t bytes, const std::shared_ptr<Owner>& owner) {
  std::lock_guard<std::mutex> lk(mu_);
  Slot* best = nullptr;
  for (Slot& s : slots_) {
    if (s.owner && s.owner->finished()) s.owner.reset();
    if (!s.owner && s.bytes >= bytes && (!best || s.bytes < best->bytes)) best = &s;
  }
  if (!best) {
    // Powers of two: buckets of nearly equal sizes share slots.
    const size_t size = std::bit_ceil(std::max(bytes, kMinSlotBytes));
    slots_.push_back(Slot{device_->host_buffer(size), size, nullptr});
    best = &slots_.back();
  }
  best->owner = owner;
  return best->mem.get();
}

size_t StagingPool::buffers() const {
  std::lock_guard<std::mutex> lk(mu_);
  return slots_.size();
}

size_t StagingPool::bytes_held() const {
  std::lock_guard<std::mutex> lk(mu_);
  size_t n = 0;
  for (const Slot& s : slots_) n += s.bytes;
  return n;
}

// ------------------------------------------------------------------ plan --

StagingPlan plan_staging(const void* input, size_t input_bytes, const void* output, size_t output_bytes) {
  const auto in = reinterpret_cast<uintptr_t>(input), out = reinterpret_cast<uintptr_t>(output);
  StagingPlan p;
  if (output == nullptr || (in == out && input_bytes == output_bytes)) {
    p.bytes = input_bytes;
    return p;
  }
  if (out >= in && out + output_bytes <= in + input_bytes) {  // output inside input
    p.bytes = input_bytes;
    p.output_at = out - in;
    return p;
  }
  if (in >= out && in + input_bytes <= out + output_bytes) {  // input inside output
    p.bytes = output_bytes;
    p.input_at = in - out;
    return p;
  }
  if (in < out + output_bytes && out < in + input_bytes)
    throw CommError("staging a collective: input and output overlap without one holding the other");
  p.output_at = (input_bytes + 63) / 64 * 64;
  p.bytes = p.output_at + output_bytes;
  return p;
}

// ---------------------------------------------------------- collectives --

StagedCommunicator::StagedCommunicator(std::shared_ptr<GlooCommunicator> host,
                                       std::shared_ptr<StagingDevice> device)
    : device_(std::move(device)), pool_(device_), host_(std::move(host)) {}

namespace {

// Both buffers on the device (staged) or both on the host (Gloo as is).
bool on_device(const std::string& group, OpKind kind, const Tensor& input, const Tensor& output) {
  check_buffer(group, kind, "input", input);
  check_buffer(group, kind, "output", output);
  if (input.device != output.device)
    throw CommError(std::string(op_name(kind)) + " on group " + group +
                    ": input and output must both be CUDA tensors or both host tensors");
  return input.device == Device::CUDA;
}

}  // namespace

template <typename Issue>
WorkPtr StagedCommunicator::staged(const Tensor& input, const Tensor& output, bool copy_input, Issue&& issue) {
  const bool one_buffer = input.data == output.data && input.nbytes() == output.nbytes();
  const StagingPlan plan = plan_staging(input.data, input.nbytes(), one_buffer ? nullptr : output.data, output.nbytes());
  auto op = std::make_shared<Op>(device_);
  // Earlier collectives still in flight whose copy back writes memory this
  // one reads or writes: wait for their data to arrive (their copy back is
  // queued then) and order this copy to host after it.
  std::vector<StagingDevice::FencePtr> after;
  const auto in0 = reinterpret_cast<uintptr_t>(input.data), in1 = in0 + input.nbytes();
  const auto out0 = reinterpret_cast<uintptr_t>(output.data), out1 = out0 + output.nbytes();
  std::erase_if(in_flight_, [](const std::shared_ptr<Op>& o) { return o->finished(); });
  for (const std::shared_ptr<Op>& o : in_flight_) {
    const bool overlaps = (o->out_begin < in1 && in0 < o->out_end) || (o->out_begin < out1 && out0 < o->out_end);
    if (!overlaps) continue;
    o->host_work->wait();  // throws under FailurePolicy::Throw, like the caller's own wait would
    if (auto f = o->back()) after.push_back(std::move(f));
  }
  op->out_begin = out0;
  op->out_end = out1;
  char* host = pool_.take(std::max<size_t>(plan.bytes, 1), op);
  const Tensor host_in(host + plan.input_at, input.dtype, input.shape, Device::CPU);
  const Tensor host_out(host + plan.output_at, output.dtype, output.shape, Device::CPU);
  if (output.nbytes() > 0) op->copies_back = {{output.data, host_out.data, output.nbytes()}};
  GlooCommunicator::Hooks hooks;
  hooks.before = [op] {
    if (op->to_host) op->device->wait(op->to_host);
  };
  hooks.after = [op] {
    if (!op->copies_back.empty()) op->set_back(op->device->to_device(op->copies_back));
  };
  WorkPtr w;
  try {
    if (copy_input && input.nbytes() > 0)
      op->to_host = device_->to_host({{host_in.data, input.data, input.nbytes()}}, after);
    else if (output.nbytes() > 0 || !after.empty())
      // Nothing to copy out (a broadcast's receivers), but the copy back must
      // still land after the compute stream's work queued so far (a kernel
      // still writing or reading the output) and after `after`: the lane
      // waits for this fence before the collective, as for a copy out.
      op->to_host = device_->to_host({}, after);
    w = host_->with_hooks(std::move(hooks), [&] { return issue(host_in, host_out); });
  } catch (...) {
    // Never issued (Gloo refused it, or the copy to host could not be
    // queued): the slot frees once the copy to host, if any, is done.
    std::lock_guard<std::mutex> lk(op->mu);
    op->refused = true;
    throw;
  }
  op->set_host_work(w);
  if (output.nbytes() > 0) in_flight_.push_back(op);
  ++staged_count_;
  staged_bytes_ += (copy_input ? input.nbytes() : 0) + output.nbytes();
  return std::make_shared<StagedWork>(op, std::move(w));
}

CommStats StagedCommunicator::stats() const {
  CommStats s = host_->stats();
  s.staged.count = staged_count_;
  s.staged.bytes = staged_bytes_;
  return s;
}

WorkPtr StagedCommunicator::all_reduce(const Tensor& data, ReduceOp op, const std::string& label) {
  if (!on_device(name(), OpKind::AllReduce, data, data)) return host_->all_reduce(data, op, label);
  return staged(data, data, true, [&](const Tensor& h, const Tensor&) { return host_->all_reduce(h, op, label); });
}

WorkPtr StagedCommunicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op,
                                           const std::vector<int64_t>& counts, const std::string& label) {
  if (!on_device(name(), OpKind::ReduceScatter, input, output))
    return host_->reduce_scatter(input, output, op, counts, label);
  return staged(input, output, true, [&](const Tensor& hi, const Tensor& ho) {
    return host_->reduce_scatter(hi, ho, op, counts, label);
  });
}

WorkPtr StagedCommunicator::all_gather(const Tensor& input, const Tensor& output,
                                       const std::vector<int64_t>& counts, const std::string& label) {
  if (!on_device(name(), OpKind::AllGather, input, output)) return host_->all_gather(input, output, counts, label);
  return staged(input, output, true, [&](const Tensor& hi, const Tensor& ho) {
    return host_->all_gather(hi, ho, counts, label);
  });
}

WorkPtr StagedCommunicator::all_to_all(const Tensor& input, const Tensor& output,
                                       const std::vector<int64_t>& send_counts,
                                       const std::vector<int64_t>& recv_counts, const std::string& label) {
  if (!on_device(name(), OpKind::AllToAll, input, output))
    return host_->all_to_all(input, output, send_counts, recv_counts, label);
  if (input.data == output.data && input.numel() > 0)
    throw CommError("all_to_all on group " + name() + ": input and output must not alias");
  return staged(input, output, true, [&](const Tensor& hi, const Tensor& ho) {
    return host_->all_to_all(hi, ho, send_counts, recv_counts, label);
  });
}

WorkPtr StagedCommunicator::broadcast(const Tensor& data, int root, const std::string& label) {
  if (!on_device(name(), OpKind::Broadcast, data, data)) return host_->broadcast(data, root, label);
  // Only the root's data leaves the device; the others receive into host memory.
  return staged(data, data, rank() == root, [&](const Tensor& h, const Tensor&) {
    return host_->broadcast(h, root, label);
  });
}

}  // namespace weft::comm
