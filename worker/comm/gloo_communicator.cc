#include "comm/gloo_communicator.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>
#include <type_traits>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "comm/gloo_mesh.h"
#include "comm/tcp_store.h"
#include "tensor/bf16.h"
#include "weft_contract.h"

namespace weft::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Hooks for the next collective this thread issues (GlooCommunicator::with_hooks).
thread_local GlooCommunicator::Hooks* next_hooks = nullptr;

// Slot prefix for weft's own ring reduce-scatter; Gloo's collectives use
// small prefixes (1..10), so this cannot collide with them.
constexpr uint8_t kRingSlotPrefix = 0xA7;
// Segment of the ring reduce-scatter's messages (see ring_reduce_scatter).
constexpr size_t kRingSegmentBytes = size_t{1} << 20;

void sum_bf16(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<uint16_t*>(c);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(bf16_to_f32(x[i]) + bf16_to_f32(y[i]));
}

void sum_f32(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<float*>(c);
  auto* x = static_cast<const float*>(a);
  auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);
ReduceFn sum_fn(DType t) { return t == DType::BF16 ? &sum_bf16 : &sum_f32; }

void scale(void* p, DType t, int64_t n, float s) {
  if (t == DType::BF16) {
    auto* h = static_cast<uint16_t*>(p);
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(bf16_to_f32(h[i]) * s);
  } else {
    auto* f = static_cast<float*>(p);
    for (int64_t i = 0; i < n; ++i) f[i] *= s;
  }
}

// Calls f with a null pointer of the element type Gloo should see (bf16 is
// moved as opaque 16-bit words; only our reduction functions interpret it).
template <typename F>
void with_type(DType t, F&& f) {
  if (t == DType::BF16) f(static_cast<uint16_t*>(nullptr));
  else f(static_cast<float*>(nullptr));
}

// The memory a flat buffer covers, for the lanes' overlap check.
std::pair<uintptr_t, uintptr_t> extent(const Tensor& t) {
  auto p = reinterpret_cast<uintptr_t>(t.data);
  return {p, p + t.nbytes()};
}

}  // namespace

// ------------------------------------------------------------------ work --

class GlooWork : public Work {
 public:
  GlooWork() : issued_(Clock::now()) {}

  void wait() override {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return done_; });
    if (!error_.empty()) throw CommError(error_);
  }
  bool completed() override {
    std::lock_guard<std::mutex> lk(mu_);
    return done_;
  }
  // As wait(), without throwing: another lane's collective waits for this one.
  void wait_done() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return done_; });
  }
  double comm_seconds() override {
    std::lock_guard<std::mutex> lk(mu_);
    return done_ ? std::chrono::duration<double>(end_ - start_).count() : 0.0;
  }
  double enqueue_to_start_seconds() override {
    std::lock_guard<std::mutex> lk(mu_);
    return started_ ? std::chrono::duration<double>(start_ - issued_).count() : 0.0;
  }

  void mark_started() {
    std::lock_guard<std::mutex> lk(mu_);
    start_ = Clock::now();
    started_ = true;
  }
  // `account(seconds)` runs before waiters wake, so that a caller who waited
  // on this op sees it in stats() (it once ran after, and a test read 0).
  template <typename F>
  void mark_done(std::string error, F&& account) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!started_) start_ = Clock::now(), started_ = true;
    end_ = Clock::now();
    error_ = std::move(error);
    account(std::chrono::duration<double>(end_ - start_).count());
    done_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool done_ = false;
  std::string error_;
  Clock::time_point issued_, start_, end_;
};

// ---------------------------------------------------------- construction --

// The device's event-loop thread (created inside CreateDevice, inheriting the
// creating thread's policy) runs SCHED_BATCH, so that its wake-ups do not
// preempt a running thread. Gloo's loop only *tries* the pair lock and, when a
// collective's thread holds it (Pair::send does its writev under it), spins
// on epoll_wait until it is free; woken onto the CPU of the lock holder it
// preempted, it spun there for the rest of its slice (~4 ms) while the holder
// waited behind it: 300 k epoll_wait/s, and 2-4 ms per small all-reduce on
// one lane against 0.5 ms without (docs/benchmarks/collectives.md). A batch
// thread still runs as soon as a CPU is free, and the policy needs no
// privilege; where it cannot be set the device is created as before.
std::shared_ptr<gloo::transport::Device> make_gloo_device(const std::string& bind_addr) {
  gloo::transport::tcp::attr attr;
  attr.hostname = bind_addr;
  std::shared_ptr<gloo::transport::Device> device;
  std::exception_ptr error;
  std::thread([&] {
#ifdef SCHED_BATCH
    sched_param param{};
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);  // best effort
#endif
    try {
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (...) {
      error = std::current_exception();
    }
  }).join();
  try {
    if (error) std::rethrow_exception(error);
  } catch (const std::exception& e) {
    throw CommError("cannot create the Gloo TCP device on '" + bind_addr +
                    "' (" + contract::kEnvBindAddr + "): " + e.what());
  }
  return device;
}

std::shared_ptr<GlooCommunicator> GlooCommunicator::create(
    CommContext& ctx, TcpStore* store, std::shared_ptr<gloo::transport::Device> device,
    std::string name, std::vector<int> members, int global_rank, int lanes) {
  auto it = std::find(members.begin(), members.end(), global_rank);
  if (it == members.end())
    throw CommError("group " + name + ": rank " + std::to_string(global_rank) + " is not a member");
  if (lanes < 1)
    throw CommError("group " + name + ": comm.lanes must be >= 1, got " + std::to_string(lanes));
  int rank = static_cast<int>(it - members.begin());
  int size = static_cast<int>(members.size());
  // A one-rank group has nothing to overlap; otherwise N bulk lanes and, with
  // N >= 2, an express lane in front of them.
  const int contexts_needed = size == 1 || lanes == 1 ? 1 : lanes + 1;
  std::vector<std::shared_ptr<gloo::Context>> contexts;
  if (size > 1) {
    if (!store) throw CommError("group " + name + ": " + std::to_string(size) +
                                " ranks need a rendezvous store (" +
                                contract::kEnvMasterAddr + "/" + contract::kEnvMasterPort + ")");
    // All lanes in one record per rank and one batched read (comm/gloo_mesh.h).
    try {
      contexts = connect_full_meshes(*store, mesh_key_prefix(name, members), device, rank, size, contexts_needed,
                                     store->timeout());
    } catch (const RendezvousError& e) {
      throw RendezvousError("group " + name + ": connecting the Gloo full mesh failed: " + e.what());
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {
      throw RendezvousError("group " + name + ": connecting the Gloo full mesh failed: " + e.what());
    }
  } else {
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    gloo::rendezvous::HashStore local;
    context->connectFullMesh(local, device);
    contexts.push_back(std::move(context));
  }
  for (auto& c : contexts) c->setTimeout(ctx.timeout());
  return std::shared_ptr<GlooCommunicator>(
      new GlooCommunicator(ctx, std::move(name), std::move(members), rank, std::move(contexts)));
}

GlooCommunicator::GlooCommunicator(CommContext& ctx, std::string name, std::vector<int> members,
                                   int rank, std::vector<std::shared_ptr<gloo::Context>> contexts)
    : ctx_(ctx), name_(std::move(name)), members_(std::move(members)), rank_(rank) {
  for (auto& c : contexts) {
    lanes_.push_back(std::make_unique<Lane>());
    lanes_.back()->context = std::move(c);
  }
  for (auto& lane : lanes_) {
    Lane* l = lane.get();
    l->thread = std::thread([this, l] { comm_loop(*l); });
  }
}

GlooCommunicator::~GlooCommunicator() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  for (auto& lane : lanes_) lane->cv.notify_all();
  // Each lane drains its queue first: issued collectives always run.
  for (auto& lane : lanes_) lane->thread.join();
}

// ------------------------------------------------------------ comm thread --

int GlooCommunicator::pick_lane(OpKind kind, uint64_t group_bytes) {
  const int n = static_cast<int>(lanes_.size());
  if (n == 1) return 0;
  if (kind == OpKind::Barrier || group_bytes <= kExpressLaneBytes) return 0;
  return 1 + static_cast<int>(next_bulk_++ % static_cast<uint64_t>(n - 1));
}

WorkPtr GlooCommunicator::enqueue(OpKind kind, const std::string& label, uint64_t bytes,
                                  uint64_t group_bytes, Extents extents,
                                  std::function<void(const RunCtx&, uint32_t)> run) {
  auto work = std::make_shared<GlooWork>();
  Lane* lane = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) throw CommError("group " + name_ + ": communicator is shutting down");
    const int index = pick_lane(kind, group_bytes);
    lane = lanes_[index].get();
    // Tags follow issue order, which every member shares, so concurrent
    // groups and back-to-back collectives never match each other's messages.
    Op op{kind, label, bytes, next_tag_++, std::move(run), work, {}, {}};
    if (next_hooks) op.hooks = std::exchange(*next_hooks, Hooks{});
    if (lanes_.size() > 1) {
      // Keep issue order where it matters: wait for collectives in flight on
      // other lanes whose memory overlaps ours (a barrier waits for all).
      std::erase_if(in_flight_, [](const InFlight& f) { return f.work->completed(); });
      for (const InFlight& f : in_flight_) {
        if (f.lane == index) continue;  // the lane's FIFO orders these already
        bool overlap = kind == OpKind::Barrier;
        for (const auto& [a0, a1] : extents)
          for (const auto& [b0, b1] : f.extents)
            overlap = overlap || (a0 < b1 && b0 < a1);
        if (overlap) op.after.push_back(f.work);
      }
      in_flight_.push_back(InFlight{index, std::move(extents), work});
    }
    lane->queue.push_back(std::move(op));
  }
  lane->cv.notify_one();
  return work;
}

WorkPtr GlooCommunicator::with_hooks(Hooks hooks, const std::function<WorkPtr()>& issue) {
  Hooks* outer = std::exchange(next_hooks, &hooks);
  try {
    WorkPtr w = issue();
    next_hooks = outer;
    return w;
  } catch (...) {
    next_hooks = outer;
    throw;
  }
}

void GlooCommunicator::simulate_network(const Op& op, bool express) {
  const NetworkModel& net = ctx_.network();
  const auto total = net.delay(op.kind, op.bytes, size());
  if (total.count() <= 0) return;
  const auto now = Clock::now();
  // The express lane's few bytes interleave with bulk transfers on a real
  // link (TCP shares it), so they pay their own modelled cost only.
  if (express) return std::this_thread::sleep_until(now + total);
  // Bulk lanes share one modelled link: latencies overlap, but the transfer
  // terms queue, so two lanes do not get twice the bandwidth. One lane: the
  // whole modelled cost, as before lanes.
  const auto latency = NetworkModel{net.latency_s, 0}.delay(op.kind, op.bytes, size());
  const auto transfer = std::chrono::duration_cast<Clock::duration>(total - latency);
  Clock::time_point until;
  {
    std::lock_guard<std::mutex> lk(mu_);
    link_free_ = std::max(link_free_, now + std::chrono::duration_cast<Clock::duration>(latency)) + transfer;
    until = link_free_;
  }
  std::this_thread::sleep_until(until);
}

void GlooCommunicator::comm_loop(Lane& lane) {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lk(mu_);
      lane.cv.wait(lk, [&] { return stop_ || !lane.queue.empty(); });
      if (lane.queue.empty()) return;
      op = std::move(lane.queue.front());
      lane.queue.pop_front();
    }
    // Earlier overlapping collectives on other lanes first. They only ever
    // point to lower tags, so the lowest unfinished collective can always run.
    for (auto& dep : op.after) dep->wait_done();
    std::string poisoned;
    {
      std::lock_guard<std::mutex> lk(mu_);
      poisoned = poisoned_;
    }
    if (!poisoned.empty()) {
      op.work->mark_done(poisoned, [](double) {});
      continue;
    }
    std::string error;
    // Staging before the start: the wait for the device's copy is not
    // communication time.
    if (op.hooks.before) {
      try {
        op.hooks.before();
      } catch (const std::exception& e) {
        error = fail(op, lane, e);
      }
    }
    op.work->mark_started();
    CommContext::Watch w;
    w.op = op.kind;
    w.group = name_;
    w.label = op.label;
    w.deadline = Clock::now() + ctx_.timeout();
    uint64_t watch_id = ctx_.watch(std::move(w));
    lane.failed_peer = -1;
    if (error.empty()) {
      try {
        op.run(RunCtx{lane.context, &lane.failed_peer, &lane.scratch}, op.tag);
        // comm.simulate: the collective takes as long as on the modelled network.
        simulate_network(op, lanes_.size() > 1 && &lane == lanes_[0].get());
        if (op.hooks.after) op.hooks.after();
      } catch (const std::exception& e) {
        error = fail(op, lane, e);
      }
    }
    ctx_.unwatch(watch_id);
    if (!error.empty()) {
      std::lock_guard<std::mutex> lk(mu_);
      if (poisoned_.empty()) poisoned_ = error;
    }
    op.work->mark_done(error, [&](double secs) {
      if (error.empty()) stats_.add(op.kind, secs, op.bytes);
    });
  }
}

std::string GlooCommunicator::fail(const Op& op, const Lane& lane, const std::exception& e) {
  CommFailure f;
  std::string what = e.what();
  f.timeout = what.find("imed out") != std::string::npos;
  f.op = op.kind;
  f.group = name_;
  f.label = op.label;
  f.peer = lane.failed_peer >= 0 ? members_[lane.failed_peer] : -1;
  f.detail = what;
  return ctx_.fail(f);  // does not return under FailurePolicy::Exit
}

// ------------------------------------------------------------ collectives --

namespace {
// Gloo reads and writes host memory: a CUDA pointer handed to it would be
// dereferenced on the lane's thread (a crash, not an error). CUDA tensors
// reach Gloo only through StagedCommunicator, which hands it host copies.
void check_host_buffer(const std::string& group, OpKind op, const char* which, const Tensor& t) {
  check_buffer_on(group, op, which, t, Device::CPU,
                  "Gloo takes host memory (device: cuda over gloo stages its collectives through "
                  "StagedCommunicator)");
}
}  // namespace

WorkPtr GlooCommunicator::all_reduce(const Tensor& data, ReduceOp op, const std::string& label) {
  check_host_buffer(name_, OpKind::AllReduce, "data", data);
  Tensor t = data;
  int n = size();
  return enqueue(OpKind::AllReduce, label, t.nbytes(), t.nbytes(), {extent(t)},
                 [this, t, op, n](const RunCtx& rc, uint32_t tag) {
    if (n == 1 || t.numel() == 0) return;
    gloo::AllreduceOptions o(rc.context);
    if (t.dtype == DType::BF16)
      o.setOutput(static_cast<uint16_t*>(t.data), static_cast<size_t>(t.numel()));
    else
      o.setOutput(static_cast<float*>(t.data), static_cast<size_t>(t.numel()));
    o.setReduceFunction(sum_fn(t.dtype));
    o.setTag(tag);
    o.setTimeout(ctx_.timeout());
    gloo::allreduce(o);
    if (op == ReduceOp::Avg) scale(t.data, t.dtype, t.numel(), 1.0f / static_cast<float>(n));
  });
}

WorkPtr GlooCommunicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op,
                                         const std::vector<int64_t>& counts,
                                         const std::string& label) {
  check_host_buffer(name_, OpKind::ReduceScatter, "input", input);
  check_host_buffer(name_, OpKind::ReduceScatter, "output", output);
  if (input.dtype != output.dtype) throw CommError("reduce_scatter on group " + name_ + ": input and output dtypes differ");
  auto c = split_counts(name_, OpKind::ReduceScatter, input.numel(), size(), counts);
  if (output.numel() != c[rank_])
    throw CommError("reduce_scatter on group " + name_ + ": output holds " +
                    std::to_string(output.numel()) + " elements, rank " + std::to_string(rank_) +
                    "'s share is " + std::to_string(c[rank_]));
  Tensor in = input, out = output;
  return enqueue(OpKind::ReduceScatter, label, input.nbytes(), input.nbytes(), {extent(in), extent(out)},
                 [this, in, out, op, c](const RunCtx& rc, uint32_t tag) {
                   ring_reduce_scatter(rc, in, out, op, c, tag);
                 });
}

// A ring reduce-scatter (Gloo's ReduceScatterHalvingDoubling has no timeout
// and allocates the whole buffer per call). Input stays untouched, except
// where the output aliases it: partial sums travel through the lane's
// scratch. At step s rank r sends chunk (r-s-1) mod n and receives chunk
// (r-s-2) mod n, so after n-1 steps the chunk it completes is its own.
//
// Each step moves its chunk in segments of up to kRingSegmentBytes, all
// posted at once, and reduces every segment as soon as it has arrived, so the
// additions overlap the transfer of the segments behind them (one message per
// chunk left the link idle while the whole chunk was added). The last step
// receives straight into the output and adds the input's share there, so two
// ranks need no staging at all unless the output aliases the input (ZeRO's
// in-place bucket shards); earlier steps alternate between two partial-sum
// buffers, so a step's sends never read what its additions write.
void GlooCommunicator::ring_reduce_scatter(const RunCtx& rc, const Tensor& in, const Tensor& out,
                                           ReduceOp op, const std::vector<int64_t>& counts,
                                           uint32_t tag) {
  const int n = size();
  const size_t es = dtype_size(in.dtype);
  auto off = offsets_of(counts);
  if (n == 1) {
    std::memmove(out.data, in.data, out.nbytes());
    return;
  }
  const size_t chunk = static_cast<size_t>(*std::max_element(counts.begin(), counts.end())) * es;
  const auto [in_lo, in_hi] = extent(in);
  const auto [out_lo, out_hi] = extent(out);
  const bool aliased = out_lo < in_hi && in_lo < out_hi;
  // Scratch: [recv | acc0 | acc1]; recv only when the last step cannot land
  // in the output or there are steps before it, acc only for n > 2.
  const size_t recv_bytes_cap = (aliased || n > 2) ? chunk : 0;
  const size_t acc_bytes_cap = n > 2 ? chunk : 0;
  std::vector<char>& scratch = *rc.scratch;
  if (scratch.size() < recv_bytes_cap + 2 * acc_bytes_cap) scratch.resize(recv_bytes_cap + 2 * acc_bytes_cap);
  char* recv = scratch.data();
  char* acc[2] = {scratch.data() + recv_bytes_cap, scratch.data() + recv_bytes_cap + acc_bytes_cap};

  auto in_buf = rc.context->createUnboundBuffer(in.data, in.nbytes());
  auto out_buf = rc.context->createUnboundBuffer(out.data, out.nbytes());
  std::unique_ptr<gloo::transport::UnboundBuffer> scratch_buf;
  if (!scratch.empty()) scratch_buf = rc.context->createUnboundBuffer(scratch.data(), scratch.size());
  const int right = (rank_ + 1) % n, left = (rank_ + n - 1) % n;
  const uint64_t slot = gloo::Slot::build(kRingSlotPrefix, tag);
  const auto deadline = Clock::now() + ctx_.timeout();
  auto left_ms = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  const size_t seg = std::max(es, kRingSegmentBytes / es * es);
  ReduceFn add = sum_fn(in.dtype);
  for (int s = 0; s < n - 1; ++s) {
    const int send_idx = ((rank_ - s - 1) % n + n) % n;
    const int recv_idx = ((rank_ - s - 2) % n + n) % n;
    const size_t send_bytes = static_cast<size_t>(counts[send_idx]) * es;
    const size_t recv_bytes = static_cast<size_t>(counts[recv_idx]) * es;
    const bool last = s == n - 2;
    // Where this step's bytes come from and go, as (buffer, offset) pairs.
    gloo::transport::UnboundBuffer* src = s == 0 ? in_buf.get() : scratch_buf.get();
    const size_t src_off = s == 0 ? static_cast<size_t>(off[send_idx]) * es : static_cast<size_t>(acc[s % 2] - recv);
    const bool into_out = last && !aliased;
    gloo::transport::UnboundBuffer* dst_buf = into_out ? out_buf.get() : scratch_buf.get();
    char* landed = into_out ? static_cast<char*>(out.data) : recv;
    char* sum = last ? static_cast<char*>(out.data) : acc[(s + 1) % 2];
    const char* mine = element_at(in, off[recv_idx]);
    for (size_t o = 0; o < recv_bytes; o += seg) dst_buf->recv(left, slot, o, std::min(seg, recv_bytes - o));
    for (size_t o = 0; o < send_bytes; o += seg) src->send(right, slot, src_off + o, std::min(seg, send_bytes - o));
    for (size_t o = 0; o < recv_bytes; o += seg) {
      *rc.failed_peer = left;
      dst_buf->waitRecv(left_ms());
      *rc.failed_peer = -1;
      add(sum + o, mine + o, landed + o, std::min(seg, recv_bytes - o) / es);
    }
    for (size_t o = 0; o < send_bytes; o += seg) {
      *rc.failed_peer = right;
      src->waitSend(left_ms());
    }
    *rc.failed_peer = -1;
  }
  if (op == ReduceOp::Avg) scale(out.data, out.dtype, out.numel(), 1.0f / static_cast<float>(n));
}

WorkPtr GlooCommunicator::all_gather(const Tensor& input, const Tensor& output,
                                     const std::vector<int64_t>& counts, const std::string& label) {
  check_host_buffer(name_, OpKind::AllGather, "input", input);
  check_host_buffer(name_, OpKind::AllGather, "output", output);
  if (input.dtype != output.dtype) throw CommError("all_gather on group " + name_ + ": input and output dtypes differ");
  auto c = split_counts(name_, OpKind::AllGather, output.numel(), size(), counts);
  if (input.numel() != c[rank_])
    throw CommError("all_gather on group " + name_ + ": input holds " + std::to_string(input.numel()) +
                    " elements, rank " + std::to_string(rank_) + "'s share is " + std::to_string(c[rank_]));
  auto off = offsets_of(c);
  Tensor in = input, out = output;
  bool equal = counts.empty() || std::all_of(c.begin(), c.end(), [&](int64_t x) { return x == c[0]; });
  return enqueue(OpKind::AllGather, label, input.nbytes(), out.nbytes(), {extent(in), extent(out)},
                 [this, in, out, c, off, equal](const RunCtx& rc, uint32_t tag) {
    // Gloo copies the input into the output's own slot; give it an input
    // only when it is elsewhere, as it may alias (ZeRO gathers in place).
    char* own = element_at(out, off[rank_]);
    if (in.data != own) std::memmove(own, in.data, in.nbytes());
    if (size() == 1 || out.numel() == 0) return;
    // Gloo's allgather wants an input buffer; a copy of our own share keeps
    // it from reading the output it is writing.
    std::vector<char> mine(own, own + in.nbytes());
    if (equal) {
      gloo::AllgatherOptions o(rc.context);
      with_type(out.dtype, [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        o.setInput(reinterpret_cast<T*>(mine.data()), static_cast<size_t>(c[rank_]));
        o.setOutput(static_cast<T*>(out.data), static_cast<size_t>(out.numel()));
      });
      o.setTag(tag);
      o.setTimeout(ctx_.timeout());
      gloo::allgather(o);
    } else {
      gloo::AllgathervOptions o(rc.context);
      std::vector<size_t> elems(c.begin(), c.end());
      if (out.dtype == DType::BF16) {
        o.setInput(reinterpret_cast<uint16_t*>(mine.data()), static_cast<size_t>(c[rank_]));
        o.setOutput(static_cast<uint16_t*>(out.data), elems);
      } else {
        o.setInput(reinterpret_cast<float*>(mine.data()), static_cast<size_t>(c[rank_]));
        o.setOutput(static_cast<float*>(out.data), elems);
      }
      o.setTag(tag);
      o.setTimeout(ctx_.timeout());
      gloo::allgatherv(o);
    }
  });
}

WorkPtr GlooCommunicator::all_to_all(const Tensor& input, const Tensor& output,
                                     const std::vector<int64_t>& send_counts,
                                     const std::vector<int64_t>& recv_counts,
                                     const std::string& label) {
  check_host_buffer(name_, OpKind::AllToAll, "input", input);
  check_host_buffer(name_, OpKind::AllToAll, "output", output);
  if (input.dtype != output.dtype) throw CommError("all_to_all on group " + name_ + ": input and output dtypes differ");
  if (send_counts.empty() != recv_counts.empty())
    throw CommError("all_to_all on group " + name_ + ": give both send and receive counts or neither");
  if (send_counts.empty() && input.numel() != output.numel())
    throw CommError("all_to_all on group " + name_ + ": input holds " + std::to_string(input.numel()) +
                    " elements but output " + std::to_string(output.numel()));
  auto sc = split_counts(name_, OpKind::AllToAll, input.numel(), size(), send_counts);
  auto rc = split_counts(name_, OpKind::AllToAll, output.numel(), size(), recv_counts);
  if (input.data == output.data && input.numel() > 0)
    throw CommError("all_to_all on group " + name_ + ": input and output must not alias");
  Tensor in = input, out = output;
  bool equal = send_counts.empty();
  // Uneven shares: members may pass different input sizes, so none picks an
  // express lane by size.
  const uint64_t group_bytes = equal ? in.nbytes() : UINT64_MAX;
  return enqueue(OpKind::AllToAll, label, input.nbytes(), group_bytes, {extent(in), extent(out)},
                 [this, in, out, sc, rc, equal](const RunCtx& run, uint32_t tag) {
    if (size() == 1) {
      std::memcpy(out.data, in.data, in.nbytes());
      return;
    }
    if (in.numel() == 0 && out.numel() == 0 && equal) return;
    if (equal) {
      gloo::AlltoallOptions o(run.context);
      with_type(out.dtype, [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        o.setInput(static_cast<T*>(in.data), static_cast<size_t>(in.numel()));
        o.setOutput(static_cast<T*>(out.data), static_cast<size_t>(out.numel()));
      });
      o.setTag(tag);
      o.setTimeout(ctx_.timeout());
      gloo::alltoall(o);
    } else {
      gloo::AlltoallvOptions o(run.context);
      if (out.dtype == DType::BF16) {
        o.setInput(static_cast<uint16_t*>(in.data), sc);
        o.setOutput(static_cast<uint16_t*>(out.data), rc);
      } else {
        o.setInput(static_cast<float*>(in.data), sc);
        o.setOutput(static_cast<float*>(out.data), rc);
      }
      o.setTag(tag);
      o.setTimeout(ctx_.timeout());
      gloo::alltoallv(o);
    }
  });
}

WorkPtr GlooCommunicator::broadcast(const Tensor& data, int root, const std::string& label) {
  check_host_buffer(name_, OpKind::Broadcast, "data", data);
  if (root < 0 || root >= size())
    throw CommError("broadcast on group " + name_ + ": root " + std::to_string(root) +
                    " is not a group rank (size " + std::to_string(size()) + ")");
  Tensor t = data;
  return enqueue(OpKind::Broadcast, label, t.nbytes(), t.nbytes(), {extent(t)},
                 [this, t, root](const RunCtx& rc, uint32_t tag) {
    if (size() == 1 || t.numel() == 0) return;
    gloo::BroadcastOptions o(rc.context);
    with_type(t.dtype, [&](auto* p) {
      using T = std::remove_pointer_t<decltype(p)>;
      o.setOutput(static_cast<T*>(t.data), static_cast<size_t>(t.numel()));
    });
    o.setRoot(root);
    o.setTag(tag);
    o.setTimeout(ctx_.timeout());
    *rc.failed_peer = rank_ == root ? -1 : root;
    gloo::broadcast(o);
  });
}

WorkPtr GlooCommunicator::barrier(const std::string& label) {
  return enqueue(OpKind::Barrier, label, 0, 0, {}, [this](const RunCtx& rc, uint32_t tag) {
    if (size() == 1) return;
    gloo::BarrierOptions o(rc.context);
    o.setTag(tag);
    o.setTimeout(ctx_.timeout());
    gloo::barrier(o);
  });
}

}  // namespace weft::comm
