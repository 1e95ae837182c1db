// weft_comm_rank: one rank of a multi-process comm test. The gtests in this
// directory (and weft-run's tests) start N of these with the rank environment
// contract; each runs one scenario and exits with a code the test checks.
//   collectives SP WP [LANES]
//                       every collective on every group of the grid, issued on
//                       all groups before any wait; checked against references
//                       (support/collective_checks.h, which the fake also meets)
//   ordering LANES      collectives on overlapping memory, issued back to back
//                       so they land on different lanes: results as in issue order
//   staged_ordering LANES  the same through host staging (the late fake device)
//   staged_compute_order LANES  staged broadcast and all-reduce issued while a
//                       slow "kernel" on the fake's compute stream still
//                       writes their buffers: its writes come first
//   staged_teardown LANES  a staged communicator destroyed with collectives
//                       still queued: no copy back from freed host memory
//   express LANES       comm.simulate makes a 1 MiB all-reduce take 1.5 s; a
//                       4-byte all-reduce issued after it must finish first
//                       with lanes >= 2 (express lane), and after it with 1
//   staged SP WP LANES  as collectives, through StagedCommunicator (CUDA
//                       tensors over Gloo) with host memory behind a fake
//                       device whose copies run late on their own threads;
//                       two rounds, so the pool's buffers are reused
//   rendezvous          init, barrier, all-reduce of the ranks
//   formed              init; rank 0 then connects to its own store as a new
//                       client with the right token (refused: the gang formed)
//                       and every rank set/gets through its existing
//                       connection and all-reduces
//   die K MS [LANES]    timeout MS; rank K is SIGKILLed after the first
//                       step, the others keep reducing (must exit 3); with
//                       LANES, every step keeps every lane busy
//   hang K MS [LANES]   timeout MS; rank K stops participating (others exit 3)
// Exit codes: 0 ok, 1 setup error (message on stderr), 3 comm failure (from
// the watchdog), 10 wrong result.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/gloo_communicator.h"
#include "comm/process_groups.h"
#include "comm/staged_communicator.h"
#include "support/collective_checks.h"

using namespace weft;
using namespace weft::comm;

namespace {

int g_failures = 0;

void expect_near(const std::string& what, double got, double want, double tol = 0) {
  if (std::fabs(got - want) > tol) {
    if (++g_failures <= 20)
      std::fprintf(stderr, "MISMATCH %s: got %.6g want %.6g\n", what.c_str(), got, want);
  }
}

// The groups of the collectives scenarios: the rank grid (sp, wp) with `lanes`.
std::unique_ptr<ProcessGroups> grid_groups(int sp, int wp, int lanes) {
  GroupOptions opt;
  opt.sp = sp;
  opt.wp = wp;
  opt.lanes = lanes;
  opt.timeout = std::chrono::seconds(20);
  opt.rendezvous_timeout = std::chrono::seconds(30);
  return init_process_groups(contract::parse_launch_env(current_environment()), opt);
}

int scenario_collectives(int sp, int wp, int lanes) {
  auto pg = grid_groups(sp, wp, lanes);
  weft::testing::CollectiveChecks all;
  for (Communicator* c : {pg->world.get(), pg->dp.get(), pg->sp.get(), pg->wp.get(), pg->wdp.get()})
    all.issue_all(*c);
  for (auto& w : all.works()) w->wait();
  for (auto& w : all.works())
    if (!w->completed()) expect_near("completed() after wait()", 0, 1);
  for (const std::string& wrong : all.verify())
    if (++g_failures <= 20) std::fprintf(stderr, "MISMATCH %s\n", wrong.c_str());
  CommStats st = pg->world->stats();
  const int all_reduces = weft::testing::CollectiveChecks::kAllReducesPerGroup;
  if (st.by_op["all_reduce"].count != all_reduces || st.by_op["all_reduce"].bytes == 0)
    expect_near("stats all_reduce count", static_cast<double>(st.by_op["all_reduce"].count), all_reduces);
  std::printf("rank %d: %zu collectives, %zu checks, %d failures\n", pg->rank(), all.works().size(),
              all.checks(), g_failures);
  return g_failures ? 10 : 0;
}

// A StagingDevice over host memory: each direction's copies run in order on
// a thread of their own, milliseconds late, so a collective that read
// its host buffer before the copy to host landed, or a caller that read the
// result before the copy back, gets the buffer's poison (0xAB bytes). A
// third thread is the compute stream: compute() queues work there (a slow
// "kernel"), and copies to host are ordered after the work queued before
// them, as cudaStreamWaitEvent orders them on a GPU.
class LateHostDevice : public StagingDevice {
 public:
  struct LateFence : Fence {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    void wait() {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return done; });
    }
  };
  ~LateHostDevice() override {
    for (Stream* s : {&compute_, &to_host_, &to_device_}) {
      {
        std::lock_guard<std::mutex> lk(s->mu);
        s->stop = true;
      }
      s->cv.notify_all();
      s->thread.join();
    }
  }
  // Freed as cudaFreeHost frees: after the device's queued work (it
  // synchronises the device). The memory is kept, its range remembered: a
  // copy queued later that reads or writes it counts a use after free.
  std::shared_ptr<char> host_buffer(size_t bytes) override {
    ++allocated;
    char* p = new char[bytes];
    std::memset(p, 0xAB, bytes);
    return std::shared_ptr<char>(p, [this, bytes](char* q) {
      synchronize();
      std::lock_guard<std::mutex> lk(freed_mu_);
      freed_.emplace_back(std::unique_ptr<char[]>(q), bytes);
    });
  }
  // cudaDeviceSynchronize: every stream's queued work has run.
  void synchronize() {
    for (Stream* s : {&compute_, &to_host_, &to_device_}) static_cast<LateFence&>(*s->push({})).wait();
  }
  int uses_after_free() const { return uses_after_free_; }
  FencePtr to_host(const std::vector<Copy>& copies, const std::vector<FencePtr>& after) override {
    std::vector<FencePtr> deps = after;
    deps.push_back(compute_.push({}));  // the compute stream's work so far
    return to_host_.push(copies, deps);
  }
  // Queues `work` on the compute stream, run `delay` late; returns at once.
  void compute(std::function<void()> work, std::chrono::milliseconds delay) {
    compute_.push({}, {}, std::move(work), delay);
  }
  // The host waits for the compute stream (cudaStreamSynchronize).
  void sync_compute() { static_cast<LateFence&>(*compute_.push({})).wait(); }
  void wait(const FencePtr& f) override { static_cast<LateFence&>(*f).wait(); }
  FencePtr to_device(const std::vector<Copy>& copies) override { return to_device_.push(copies); }
  // The fake has no compute stream to order: the caller waits instead.
  void compute_waits(const FencePtr& f) override { static_cast<LateFence&>(*f).wait(); }
  bool done(const FencePtr& f) override {
    auto& l = static_cast<LateFence&>(*f);
    std::lock_guard<std::mutex> lk(l.mu);
    return l.done;
  }
  int allocated = 0;

 private:
  bool freed(const void* p) {
    std::lock_guard<std::mutex> lk(freed_mu_);
    for (const auto& [q, n] : freed_)
      if (p >= q.get() && p < q.get() + n) return true;
    return false;
  }
  std::mutex freed_mu_;
  std::vector<std::pair<std::unique_ptr<char[]>, size_t>> freed_;
  std::atomic<int> uses_after_free_{0};

  struct Stream {
    Stream(LateHostDevice* dev, std::chrono::milliseconds d) : device(dev), delay(d) {}
    LateHostDevice* const device;
    const std::chrono::milliseconds delay;
    std::mutex mu;
    std::condition_variable cv;
    struct Job {
      std::vector<Copy> copies;
      std::vector<FencePtr> after;  // copies wait for these (another stream's)
      std::shared_ptr<LateFence> done;
      std::function<void()> work;   // the compute stream's jobs
      std::chrono::milliseconds delay{0};
    };
    std::deque<Job> queue;
    bool stop = false;
    std::thread thread{[this] { run(); }};
    FencePtr push(const std::vector<Copy>& copies, const std::vector<FencePtr>& after = {},
                  std::function<void()> work = {}, std::chrono::milliseconds work_delay = {}) {
      auto f = std::make_shared<LateFence>();
      {
        std::lock_guard<std::mutex> lk(mu);
        queue.push_back(Job{copies, after, f, std::move(work), work_delay});
      }
      cv.notify_one();
      return f;
    }
    void run() {
      for (;;) {
        Job job;
        {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait(lk, [&] { return stop || !queue.empty(); });
          if (queue.empty()) return;
          job = std::move(queue.front());
          queue.pop_front();
        }
        for (const FencePtr& f : job.after) static_cast<LateFence&>(*f).wait();
        if (!job.copies.empty()) std::this_thread::sleep_for(delay);
        for (const Copy& c : job.copies) {
          if (device->freed(c.src) || device->freed(c.dst)) ++device->uses_after_free_;
          std::memcpy(c.dst, c.src, c.bytes);
        }
        if (job.work) {
          std::this_thread::sleep_for(job.delay);
          job.work();
        }
        std::lock_guard<std::mutex> lk(job.done->mu);
        job.done->done = true;
        job.done->cv.notify_all();
      }
    }
  };
  // Copies back land later than copies out: a Work that did not wait for
  // its copy back is read before it lands.
  Stream to_host_{this, std::chrono::milliseconds(2)}, to_device_{this, std::chrono::milliseconds(10)};
  Stream compute_{this, std::chrono::milliseconds(0)};
};

// Hands a communicator the checks' host buffers as if they were on a GPU
// (the fake device's "device memory" is host memory).
class AsDevice : public Communicator {
 public:
  explicit AsDevice(CommunicatorPtr c) : c_(std::move(c)) {}
  static Tensor dev(Tensor t) {
    t.device = Device::CUDA;
    return t;
  }
  int rank() const override { return c_->rank(); }
  int size() const override { return c_->size(); }
  const std::string& name() const override { return c_->name(); }
  const std::vector<int>& members() const override { return c_->members(); }
  WorkPtr all_reduce(const Tensor& d, ReduceOp op, const std::string& l = "") override {
    return c_->all_reduce(dev(d), op, l);
  }
  WorkPtr reduce_scatter(const Tensor& i, const Tensor& o, ReduceOp op, const std::vector<int64_t>& c = {},
                         const std::string& l = "") override {
    return c_->reduce_scatter(dev(i), dev(o), op, c, l);
  }
  WorkPtr all_gather(const Tensor& i, const Tensor& o, const std::vector<int64_t>& c = {},
                     const std::string& l = "") override {
    return c_->all_gather(dev(i), dev(o), c, l);
  }
  WorkPtr all_to_all(const Tensor& i, const Tensor& o, const std::vector<int64_t>& s = {},
                     const std::vector<int64_t>& r = {}, const std::string& l = "") override {
    return c_->all_to_all(dev(i), dev(o), s, r, l);
  }
  WorkPtr broadcast(const Tensor& d, int root, const std::string& l = "") override {
    return c_->broadcast(dev(d), root, l);
  }
  WorkPtr barrier(const std::string& l = "") override { return c_->barrier(l); }
  CommStats stats() const override { return c_->stats(); }

 private:
  CommunicatorPtr c_;
};

int scenario_staged(int sp, int wp, int lanes) {
  auto pg = grid_groups(sp, wp, lanes);
  auto device = std::make_shared<LateHostDevice>();
  std::vector<std::shared_ptr<StagedCommunicator>> staged;
  std::vector<CommunicatorPtr> groups;
  for (const CommunicatorPtr& c : {pg->world, pg->dp, pg->sp, pg->wp, pg->wdp}) {
    auto gloo = std::dynamic_pointer_cast<GlooCommunicator>(c);
    if (!gloo) continue;  // a group of one rank needs no transport
    staged.push_back(std::make_shared<StagedCommunicator>(gloo, device));
    groups.push_back(std::make_shared<AsDevice>(staged.back()));
  }
  size_t checks = 0, works = 0;
  for (int round = 0; round < 2; ++round) {
    weft::testing::CollectiveChecks all;
    for (const CommunicatorPtr& c : groups) all.issue_all(*c);
    // The fake's compute stream is the caller: wait() returns once the copy
    // back landed, so the Work is complete right then.
    for (auto& w : all.works()) {
      w->wait();
      if (!w->completed()) expect_near("completed() right after wait()", 0, 1);
    }
    for (const std::string& wrong : all.verify())
      if (++g_failures <= 20) std::fprintf(stderr, "MISMATCH round %d %s\n", round, wrong.c_str());
    checks += all.checks();
    works += all.works().size();
  }
  size_t buffers = 0;
  for (auto& s : staged) buffers += s->pool().buffers();
  // Reuse: the second round takes the first round's buffers.
  expect_near("host buffers allocated", device->allocated, static_cast<double>(buffers));
  if (works > 0 && buffers * 2 > works) expect_near("host buffers reused across rounds", static_cast<double>(buffers), works / 2.0);
  std::printf("rank %d: %zu staged collectives, %zu checks, %zu host buffers, %d failures\n", pg->rank(), works, checks,
              buffers, g_failures);
  return g_failures ? 10 : 0;
}

// Work queued on the compute stream before a staged collective, still running
// when the collective is issued (a slow kernel writing its buffer): the copy
// out must read what it wrote, and the copy back must land after it, also
// where nothing is copied out (a broadcast's receivers).
int scenario_staged_compute_order(int lanes) {
  auto pg = grid_groups(1, 1, lanes);
  const int n = pg->world_size(), me = pg->rank();
  auto device = std::make_shared<LateHostDevice>();
  CommunicatorPtr world = std::make_shared<AsDevice>(
      std::make_shared<StagedCommunicator>(std::dynamic_pointer_cast<GlooCommunicator>(pg->world), device));
  const int64_t len = 4096;
  // Later than every copy of the fake. The receivers' kernels are slower
  // than the root's, so without the ordering their write would land after
  // the broadcast's copy back.
  const auto slow = std::chrono::milliseconds(me == 0 ? 5 : 80);
  for (int round = 0; round < 3; ++round) {
    std::vector<float> x(len, -1.0f), y(len, -1.0f);
    // Broadcast from rank 0: the root's kernel writes the value, every other
    // rank's kernel overwrites the buffer the broadcast then fills.
    device->compute([&x, me] { std::fill(x.begin(), x.end(), me == 0 ? 7.0f : 0.0f); }, slow);
    WorkPtr b = world->broadcast(Tensor::f32(x.data(), Shape{len}), 0, "broadcast after a kernel");
    // All-reduce of what a kernel writes: the copy out must wait for it.
    device->compute([&y, me] { std::fill(y.begin(), y.end(), static_cast<float>(me + 1)); }, slow);
    WorkPtr a = world->all_reduce(Tensor::f32(y.data(), Shape{len}), ReduceOp::Sum, "all-reduce after a kernel");
    b->wait();
    a->wait();
    device->sync_compute();
    for (int64_t i = 0; i < len; i += 511) {
      expect_near("round " + std::to_string(round) + " broadcast x[" + std::to_string(i) + "]", x[i], 7.0);
      expect_near("round " + std::to_string(round) + " all_reduce y[" + std::to_string(i) + "]", y[i],
                  n * (n + 1) / 2.0);
    }
  }
  std::printf("rank %d: staged collectives after slow compute, %d lanes, %d failures\n", me, lanes, g_failures);
  return g_failures ? 10 : 0;
}

// A staged communicator destroyed with its collectives still queued (an
// exception unwinding a step with buckets in flight): the Gloo lanes run them
// as the communicator goes, and their copies back must come from host memory
// that is still the pool's, not memory already freed.
int scenario_staged_teardown(int lanes) {
  auto pg = grid_groups(1, 1, lanes);
  const int me = pg->rank();
  auto gloo = std::dynamic_pointer_cast<GlooCommunicator>(pg->world);
  if (!gloo) throw std::runtime_error("staged_teardown needs a world of several ranks");
  for (CommunicatorPtr* g : {&pg->world, &pg->dp, &pg->sp, &pg->wp, &pg->wdp})
    if (g->get() == gloo.get()) g->reset();
  if (gloo.use_count() != 1) throw std::runtime_error("the world group is held elsewhere");
  auto device = std::make_shared<LateHostDevice>();
  const int64_t len = 4096;
  std::vector<std::vector<float>> data(4, std::vector<float>(len, 0.0f));
  {
    auto staged = std::make_shared<StagedCommunicator>(std::move(gloo), device);
    AsDevice world(staged);
    staged.reset();
    // Rank 0 comes late: every other rank's collectives wait in Gloo for it
    // while their communicator is destroyed.
    if (me == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (std::vector<float>& x : data) {
      // A slow kernel still writes the buffer: the collectives stay queued.
      device->compute([&x, me] { std::fill(x.begin(), x.end(), float(me + 1)); }, std::chrono::milliseconds(30));
      world.all_reduce(Tensor::f32(x.data(), Shape{len}), ReduceOp::Sum, "queued at teardown");
    }
  }  // the Works were dropped unwaited; the communicator goes here
  device->synchronize();
  expect_near("copies from freed host memory", device->uses_after_free(), 0);
  std::printf("rank %d: staged communicator destroyed with %zu collectives queued, %d lanes, %d failures\n", me,
              data.size(), lanes, g_failures);
  return g_failures ? 10 : 0;
}

int scenario_rendezvous() {
  GroupOptions opt;
  opt.timeout = std::chrono::seconds(20);
  opt.rendezvous_timeout = std::chrono::seconds(20);
  auto pg = init_process_groups(contract::parse_launch_env(current_environment()), opt);
  float x = static_cast<float>(pg->rank());
  pg->world->barrier()->wait();
  pg->world->all_reduce(Tensor::f32(&x, Shape{1}), ReduceOp::Sum)->wait();
  int n = pg->world_size();
  expect_near("sum of ranks", x, n * (n - 1) / 2.0);
  std::printf("rank %d of %d: sum of ranks %g\n", pg->rank(), n, x);
  return g_failures ? 10 : 0;
}

int scenario_formed() {
  GroupOptions opt;
  opt.timeout = std::chrono::seconds(20);
  opt.rendezvous_timeout = std::chrono::seconds(20);
  ProcessEnv env = contract::parse_launch_env(current_environment());
  auto pg = init_process_groups(env, opt);
  if (pg->rank() == 0) {
    StoreOptions so;
    so.host = env.master_addr;
    so.port = env.master_port;
    so.token = env.token;
    so.attempt = env.attempt;
    so.timeout = std::chrono::seconds(5);
    try {
      TcpStore late(so);
      std::printf("late client admitted\n");
      ++g_failures;
    } catch (const RendezvousError& e) {
      std::printf("late client refused: %s\n", e.what());
    }
  }
  TcpStore& store = *pg->store();
  store.set("after/" + std::to_string(pg->rank()), "x");
  store.wait({"after/0", "after/1"}, std::chrono::seconds(20));
  float x = static_cast<float>(pg->rank());
  pg->world->all_reduce(Tensor::f32(&x, Shape{1}), ReduceOp::Sum)->wait();
  int n = pg->world_size();
  expect_near("sum of ranks", x, n * (n - 1) / 2.0);
  std::printf("rank %d of %d after formation: sum of ranks %g\n", pg->rank(), n, x);
  return g_failures ? 10 : 0;
}

// Overlapping collectives issued back to back, without waiting, so that with
// lanes they land on different lanes (bulk, bulk, express): each must see the
// result of the one before, as with a single FIFO.
// With `staged`, the world group goes through StagedCommunicator over the
// late fake device: the overlap rule must hold for device memory too.
int scenario_ordering(int lanes, bool staged) {
  auto pg = grid_groups(1, 1, lanes);
  const int n = pg->world_size(), me = pg->rank();
  CommunicatorPtr world = pg->world;
  if (staged)
    world = std::make_shared<AsDevice>(std::make_shared<StagedCommunicator>(
        std::dynamic_pointer_cast<GlooCommunicator>(pg->world), std::make_shared<LateHostDevice>()));
  const int64_t big = 1 << 20;  // 4 MiB: a bulk lane
  for (int round = 0; round < 3; ++round) {
    std::vector<float> a(big), b(big);
    for (int64_t i = 0; i < big; ++i) a[i] = static_cast<float>((i % 7) + me), b[i] = 1.0f;
    Tensor ta = Tensor::f32(a.data(), Shape{big}), tb = Tensor::f32(b.data(), Shape{big});
    std::vector<WorkPtr> w;
    w.push_back(world->all_reduce(ta, ReduceOp::Sum, "a"));          // a = sum_r (i%7 + r)
    w.push_back(world->all_reduce(tb, ReduceOp::Sum, "b"));          // independent: b = n
    w.push_back(world->all_reduce(ta, ReduceOp::Sum, "a again"));    // a *= n
    w.push_back(world->all_reduce(ta.slice0(0, 4), ReduceOp::Sum, "a head"));  // express: *= n
    // Reads b's head once b's reduction wrote it (express lane, gathered).
    std::vector<float> heads(4 * n, 0.0f);
    w.push_back(world->all_gather(tb.slice0(0, 4), Tensor::f32(heads.data(), Shape{4 * n}), {}, "b heads"));
    for (auto& x : w) x->wait();
    const double ranks = n * (n - 1) / 2.0;
    for (int64_t i = 0; i < big; i += 4099) {
      double once = (i % 7) * n + ranks;
      expect_near("a[" + std::to_string(i) + "]", a[i], once * n * (i < 4 ? n : 1));
      expect_near("b[" + std::to_string(i) + "]", b[i], n);
    }
    for (int64_t i = 0; i < 4; ++i)
      expect_near("a head[" + std::to_string(i) + "]", a[i], ((i % 7) * n + ranks) * n * n);
    for (int i = 0; i < 4 * n; ++i) expect_near("b heads[" + std::to_string(i) + "]", heads[i], n);
  }
  std::printf("rank %d: ordering with %d lanes%s, %d failures\n", me, lanes, staged ? " (staged)" : "", g_failures);
  return g_failures ? 10 : 0;
}

int scenario_express(int lanes) {
  GroupOptions opt;
  opt.lanes = lanes;
  opt.timeout = std::chrono::seconds(20);
  opt.rendezvous_timeout = std::chrono::seconds(30);
  // 2 ranks: the 1 MiB all-reduce is 2 messages of 512 KiB -> 1.5 s.
  opt.network.bytes_per_second = (1 << 20) / 1.5;
  auto pg = init_process_groups(contract::parse_launch_env(current_environment()), opt);
  if (pg->world_size() != 2) {
    std::fprintf(stderr, "express: needs 2 ranks\n");
    return 1;
  }
  std::vector<float> big(1 << 18, 1.0f);
  float small = 1.0f;
  WorkPtr b = pg->world->all_reduce(Tensor::f32(big.data(), Shape{1 << 18}), ReduceOp::Sum, "bucket 0");
  pg->world->all_reduce(Tensor::f32(&small, Shape{1}), ReduceOp::Sum, "loss")->wait();
  const bool big_done_first = b->completed();
  b->wait();
  expect_near("small all-reduce", small, 2);
  expect_near("big all-reduce", big[12345], 2);
  expect_near("the bucket finished before the small all-reduce returned", big_done_first, lanes == 1);
  std::printf("rank %d: %d lanes, bucket done first: %d, %d failures\n", pg->rank(), lanes, big_done_first,
              g_failures);
  return g_failures ? 10 : 0;
}

int scenario_failure(bool die, int victim, int timeout_ms, int lanes) {
  GroupOptions opt;
  opt.timeout = std::chrono::milliseconds(timeout_ms);
  opt.rendezvous_timeout = std::chrono::seconds(20);
  opt.lanes = lanes;
  auto pg = init_process_groups(contract::parse_launch_env(current_environment()), opt);
  // One bucket (lanes == 1, the single FIFO); else one bucket per bulk lane
  // and a small one on the express lane, so a waiter sits on every lane.
  const int buckets = lanes == 1 ? 1 : lanes + 1;
  std::vector<std::vector<float>> data(buckets, std::vector<float>(1 << 16, 1.0f));
  if (buckets > 1) data.back().resize(16);
  for (int step = 0;; ++step) {
    pg->context().set_step(step);
    if (step == 1 && pg->rank() == victim) {
      std::fflush(stdout);
      if (die) raise(SIGKILL);
      pause();  // hang: stop participating without closing connections
    }
    std::vector<WorkPtr> works;
    for (int b = 0; b < buckets; ++b)
      works.push_back(pg->world->all_reduce(Tensor::f32(data[b].data(), Shape{static_cast<int64_t>(data[b].size())}),
                                            ReduceOp::Avg, "bucket " + std::to_string(b)));
    for (auto& w : works) w->wait();
    if (step > 100000) return 10;  // unreachable unless failure detection is broken
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "collectives" && (argc == 4 || argc == 5))
      return scenario_collectives(std::stoi(argv[2]), std::stoi(argv[3]), argc == 5 ? std::stoi(argv[4]) : 1);
    if (mode == "staged" && argc == 5)
      return scenario_staged(std::stoi(argv[2]), std::stoi(argv[3]), std::stoi(argv[4]));
    if (mode == "ordering" && argc == 3) return scenario_ordering(std::stoi(argv[2]), false);
    if (mode == "staged_ordering" && argc == 3) return scenario_ordering(std::stoi(argv[2]), true);
    if (mode == "express" && argc == 3) return scenario_express(std::stoi(argv[2]));
    if (mode == "staged_compute_order" && argc == 3) return scenario_staged_compute_order(std::stoi(argv[2]));
    if (mode == "staged_teardown" && argc == 3) return scenario_staged_teardown(std::stoi(argv[2]));
    if (mode == "rendezvous") return scenario_rendezvous();
    if (mode == "formed") return scenario_formed();
    if ((mode == "die" || mode == "hang") && (argc == 4 || argc == 5))
      return scenario_failure(mode == "die", std::stoi(argv[2]), std::stoi(argv[3]),
                              argc == 5 ? std::stoi(argv[4]) : 1);
  } catch (const RendezvousError& e) {
    std::fprintf(stderr, "weft_comm_rank: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft_comm_rank: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: weft_comm_rank collectives SP WP [LANES] | staged SP WP LANES | ordering LANES | staged_ordering LANES | staged_compute_order LANES | staged_teardown LANES | express LANES | rendezvous | formed | "
                       "die K MS [LANES] | hang K MS [LANES]\n");
  return 2;
}
