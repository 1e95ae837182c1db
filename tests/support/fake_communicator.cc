#include "support/fake_communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "tensor/bf16.h"

namespace weft::testing {

using comm::CommError;
using comm::OpKind;
using comm::ReduceOp;
using comm::WorkPtr;
using comm::element_at;
using comm::offsets_of;
using Clock = std::chrono::steady_clock;

namespace {

class FakeWork;

std::string counts_str(const std::vector<int64_t>& c) {
  std::string s;
  for (size_t i = 0; i < c.size(); ++i) s += (i ? "," : "") + std::to_string(c[i]);
  return s;
}

std::string elems(const Tensor& t) {
  return std::to_string(t.numel()) + " x " + dtype_name(t.dtype);
}

// One member's part of a collective, as issued.
struct Part {
  OpKind kind = OpKind::Barrier;
  std::string label;
  ReduceOp op = ReduceOp::Sum;
  Tensor in, out;                    // all_reduce, broadcast: both the data
  std::vector<int64_t> counts;       // resolved shares; all_to_all: send counts
  std::vector<int64_t> recv_counts;  // all_to_all
  int root = -1;
  uint64_t bytes = 0;     // this member's input, for stats()
  std::string signature;  // what every member's part must agree on
  Clock::time_point issued;
  std::weak_ptr<FakeWork> work;  // the caller may drop its handle

  std::string describe() const {
    return label.empty() ? signature : signature + " '" + label + "'";
  }
};

// Gloo's arithmetic (comm/gloo_communicator.cc: sum_f32, sum_bf16, scale):
// bf16 is added and scaled in f32 and rounded back after every operation.
float add(float a, float b) { return a + b; }
uint16_t add(uint16_t a, uint16_t b) {
  return weft::f32_to_bf16(weft::bf16_to_f32(a) + weft::bf16_to_f32(b));
}
float scaled(float a, float s) { return a * s; }
uint16_t scaled(uint16_t a, float s) { return weft::f32_to_bf16(weft::bf16_to_f32(a) * s); }

// Elements [off, off + count) of every member's input, reduced in group-rank
// order into dst.
template <typename T>
void reduce_as(const std::vector<Part>& parts, int64_t off, int64_t count, ReduceOp op, T* dst) {
  const int n = static_cast<int>(parts.size());
  const bool avg = op == ReduceOp::Avg && n > 1;  // Gloo skips the scaling for one rank
  for (int64_t i = 0; i < count; ++i) {
    T acc = reinterpret_cast<const T*>(element_at(parts[0].in, off))[i];
    for (int r = 1; r < n; ++r) acc = add(acc, reinterpret_cast<const T*>(element_at(parts[r].in, off))[i]);
    dst[i] = avg ? scaled(acc, 1.0f / static_cast<float>(n)) : acc;
  }
}

void reduce(const std::vector<Part>& parts, int64_t off, int64_t count, ReduceOp op, void* dst) {
  if (parts[0].in.dtype == DType::BF16)
    reduce_as(parts, off, count, op, static_cast<uint16_t*>(dst));
  else
    reduce_as(parts, off, count, op, static_cast<float*>(dst));
}

// Moves the data of one complete collective. Every result is computed before
// any output is written, as outputs may alias inputs. Returns an error for
// disagreements only visible across members (all_to_all counts).
std::string execute(std::vector<Part>& parts) {
  const int n = static_cast<int>(parts.size());
  const Part& p0 = parts[0];
  const size_t es = p0.kind == OpKind::Barrier ? 0 : dtype_size(p0.in.dtype);
  std::vector<std::vector<char>> result(n);
  switch (p0.kind) {
    case OpKind::AllReduce: {
      if (n == 1) break;
      std::vector<char> sum(p0.in.nbytes());
      reduce(parts, 0, p0.in.numel(), p0.op, sum.data());
      for (int r = 0; r < n; ++r) result[r] = sum;
      break;
    }
    case OpKind::ReduceScatter: {
      auto off = offsets_of(p0.counts);
      for (int r = 0; r < n; ++r) {
        result[r].resize(static_cast<size_t>(p0.counts[r]) * es);
        reduce(parts, off[r], p0.counts[r], p0.op, result[r].data());
      }
      break;
    }
    case OpKind::AllGather: {
      std::vector<char> all;
      for (const Part& p : parts) all.insert(all.end(), element_at(p.in, 0), element_at(p.in, p.in.numel()));
      for (int r = 0; r < n; ++r) result[r] = all;
      break;
    }
    case OpKind::AllToAll: {
      for (int j = 0; j < n; ++j)
        for (int s = 0; s < n; ++s)
          if (parts[s].counts[j] != parts[j].recv_counts[s])
            return "rank " + std::to_string(s) + " sends " + std::to_string(parts[s].counts[j]) +
                   " elements to rank " + std::to_string(j) + ", which expects " +
                   std::to_string(parts[j].recv_counts[s]);
      for (int j = 0; j < n; ++j)
        for (int s = 0; s < n; ++s) {
          int64_t send_off = offsets_of(parts[s].counts)[j];
          result[j].insert(result[j].end(), element_at(parts[s].in, send_off),
                           element_at(parts[s].in, send_off + parts[s].counts[j]));
        }
      break;
    }
    case OpKind::Broadcast: {
      std::vector<char> root(element_at(parts[p0.root].in, 0), element_at(parts[p0.root].in, p0.in.numel()));
      for (int r = 0; r < n; ++r)
        if (r != p0.root) result[r] = root;
      break;
    }
    case OpKind::Barrier:
      break;
  }
  for (int r = 0; r < n; ++r)
    if (!result[r].empty()) std::memcpy(parts[r].out.data, result[r].data(), result[r].size());
  return "";
}

}  // namespace

// ------------------------------------------------------------------ state --

struct FakeGroup::State : std::enable_shared_from_this<State> {
  std::string name;
  std::vector<int> members;
  std::chrono::milliseconds timeout;

  std::mutex mu;
  std::condition_variable cv;                // any Work of the group completed
  std::vector<uint64_t> next_seq;            // per member
  std::vector<std::string> last_issued;      // per member, for timeout messages
  std::vector<Clock::time_point> last_done;  // per member: its previous collective's end
  std::map<uint64_t, std::vector<std::optional<Part>>> pending;  // by sequence number
  std::string failure;                     // first failure; every later Work throws it
  std::vector<comm::StatsRecorder> stats;  // per member

  State(std::string n, std::vector<int> m, std::chrono::milliseconds t)
      : name(std::move(n)),
        members(std::move(m)),
        timeout(t),
        next_seq(members.size(), 0),
        last_issued(members.size()),
        last_done(members.size(), Clock::time_point::min()),
        stats(members.size()) {}

  int size() const { return static_cast<int>(members.size()); }
  std::string where(uint64_t seq) const {
    return "fake group " + name + ": collective #" + std::to_string(seq);
  }

  WorkPtr issue(int rank, Part part);
  void complete(uint64_t seq, std::vector<std::optional<Part>>& slot);
  void fail_all(const std::string& why);
  std::string timeout_message(uint64_t seq, int rank);
};

namespace {

// Every field is guarded by the group's mutex.
class FakeWork : public comm::Work {
 public:
  FakeWork(std::shared_ptr<FakeGroup::State> s, int rank, uint64_t seq, Clock::time_point issued)
      : s_(std::move(s)), rank_(rank), seq_(seq), issued_(issued) {}

  void wait() override {
    std::unique_lock<std::mutex> lk(s_->mu);
    if (!s_->cv.wait_for(lk, s_->timeout, [&] { return done_; }))
      s_->fail_all(s_->timeout_message(seq_, rank_));
    if (!error_.empty()) throw CommError(error_);
  }
  bool completed() override {
    std::lock_guard<std::mutex> lk(s_->mu);
    return done_;
  }
  double comm_seconds() override {
    std::lock_guard<std::mutex> lk(s_->mu);
    return done_ ? std::chrono::duration<double>(end_ - start_).count() : 0.0;
  }
  double enqueue_to_start_seconds() override {
    std::lock_guard<std::mutex> lk(s_->mu);
    return done_ ? std::chrono::duration<double>(start_ - issued_).count() : 0.0;
  }

  // Under the group's mutex.
  void finish(Clock::time_point start, Clock::time_point end, std::string error) {
    done_ = true;
    start_ = start;
    end_ = end;
    error_ = std::move(error);
  }

 private:
  std::shared_ptr<FakeGroup::State> s_;
  const int rank_;
  const uint64_t seq_;
  const Clock::time_point issued_;
  bool done_ = false;
  std::string error_;
  Clock::time_point start_, end_;
};

void finish(const Part& p, Clock::time_point start, Clock::time_point end,
            const std::string& error) {
  if (auto w = p.work.lock()) w->finish(start, end, error);
}

}  // namespace

WorkPtr FakeGroup::State::issue(int rank, Part part) {
  std::lock_guard<std::mutex> lk(mu);
  const uint64_t seq = next_seq[rank]++;
  part.issued = Clock::now();
  auto work = std::make_shared<FakeWork>(shared_from_this(), rank, seq, part.issued);
  part.work = work;
  last_issued[rank] = "#" + std::to_string(seq) + " " + part.describe();
  if (!failure.empty()) {
    work->finish(part.issued, part.issued, failure);
    return work;
  }
  auto& slot = pending[seq];
  slot.resize(members.size());
  for (int r = 0; r < size(); ++r) {
    if (slot[r] && slot[r]->signature != part.signature) {
      std::string why = where(seq) + " differs between members: rank " + std::to_string(r) +
                        " issued " + slot[r]->describe() + ", rank " + std::to_string(rank) +
                        " issued " + part.describe();
      work->finish(part.issued, part.issued, why);
      fail_all(why);
      return work;
    }
  }
  slot[rank] = std::move(part);
  bool all_here = true;
  for (const auto& p : slot) all_here = all_here && p.has_value();
  if (all_here) complete(seq, slot);
  return work;
}

void FakeGroup::State::complete(uint64_t seq, std::vector<std::optional<Part>>& slot) {
  std::vector<Part> parts;
  for (auto& p : slot) parts.push_back(std::move(*p));
  pending.erase(seq);
  std::string error = execute(parts);
  if (!error.empty()) {
    std::string why = where(seq) + " (" + parts[0].describe() + "): " + error;
    const auto now = Clock::now();
    for (const Part& p : parts) finish(p, p.issued, now, why);
    fail_all(why);
    return;
  }
  const auto end = Clock::now();
  for (int r = 0; r < size(); ++r) {
    const Part& p = parts[r];
    // When this member's comm thread would have started it: once issued and
    // once its previous collective was done (FIFO per communicator).
    const auto start = std::max(p.issued, last_done[r]);
    last_done[r] = end;
    stats[r].add(p.kind, std::chrono::duration<double>(end - start).count(), p.bytes);
    finish(p, start, end, "");
  }
  cv.notify_all();
}

void FakeGroup::State::fail_all(const std::string& why) {
  if (failure.empty()) failure = why;
  const auto now = Clock::now();
  for (auto& [seq, slot] : pending)
    for (auto& p : slot)
      if (p) finish(*p, p->issued, now, failure);
  pending.clear();
  cv.notify_all();
}

std::string FakeGroup::State::timeout_message(uint64_t seq, int rank) {
  std::string waiting_for;
  auto it = pending.find(seq);
  for (int r = 0; r < size(); ++r) {
    if (it != pending.end() && it->second[r]) continue;
    if (!waiting_for.empty()) waiting_for += ", ";
    waiting_for += "rank " + std::to_string(r) + " (last issued " +
                   (last_issued[r].empty() ? std::string("nothing") : last_issued[r]) + ")";
  }
  std::string what = it != pending.end() && it->second[rank] ? it->second[rank]->describe() : "";
  return where(seq) + (what.empty() ? "" : " " + what) + " timed out after " +
         std::to_string(timeout.count()) + " ms on rank " + std::to_string(rank) +
         ", waiting for " + waiting_for;
}

// ---------------------------------------------------------- communicator --

namespace {

class FakeCommunicator : public comm::Communicator {
 public:
  FakeCommunicator(std::shared_ptr<FakeGroup::State> s, int rank) : s_(std::move(s)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return s_->size(); }
  const std::string& name() const override { return s_->name; }
  const std::vector<int>& members() const override { return s_->members; }

  WorkPtr all_reduce(const Tensor& data, ReduceOp op, const std::string& label) override {
    check(OpKind::AllReduce, "data", data);
    Part p = part(OpKind::AllReduce, label, data, data);
    p.op = op;
    p.signature = std::string("all_reduce(") + comm::reduce_op_name(op) + ", " + elems(data) + ")";
    return s_->issue(rank_, std::move(p));
  }

  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op,
                         const std::vector<int64_t>& counts, const std::string& label) override {
    check(OpKind::ReduceScatter, "input", input);
    check(OpKind::ReduceScatter, "output", output);
    same_dtype("reduce_scatter", input, output);
    auto c = comm::split_counts(name(), OpKind::ReduceScatter, input.numel(), size(), counts);
    if (output.numel() != c[rank_])
      throw CommError("reduce_scatter on group " + name() + ": output holds " +
                      std::to_string(output.numel()) + " elements, rank " + std::to_string(rank_) +
                      "'s share is " + std::to_string(c[rank_]));
    Part p = part(OpKind::ReduceScatter, label, input, output);
    p.op = op;
    p.counts = c;
    p.signature = std::string("reduce_scatter(") + comm::reduce_op_name(op) + ", " + elems(input) +
                  ", counts " + counts_str(c) + ")";
    return s_->issue(rank_, std::move(p));
  }

  WorkPtr all_gather(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts,
                     const std::string& label) override {
    check(OpKind::AllGather, "input", input);
    check(OpKind::AllGather, "output", output);
    same_dtype("all_gather", input, output);
    auto c = comm::split_counts(name(), OpKind::AllGather, output.numel(), size(), counts);
    if (input.numel() != c[rank_])
      throw CommError("all_gather on group " + name() + ": input holds " +
                      std::to_string(input.numel()) + " elements, rank " + std::to_string(rank_) +
                      "'s share is " + std::to_string(c[rank_]));
    Part p = part(OpKind::AllGather, label, input, output);
    p.counts = c;
    p.signature = "all_gather(" + elems(output) + ", counts " + counts_str(c) + ")";
    return s_->issue(rank_, std::move(p));
  }

  WorkPtr all_to_all(const Tensor& input, const Tensor& output,
                     const std::vector<int64_t>& send_counts,
                     const std::vector<int64_t>& recv_counts, const std::string& label) override {
    check(OpKind::AllToAll, "input", input);
    check(OpKind::AllToAll, "output", output);
    same_dtype("all_to_all", input, output);
    if (send_counts.empty() != recv_counts.empty())
      throw CommError("all_to_all on group " + name() +
                      ": give both send and receive counts or neither");
    if (send_counts.empty() && input.numel() != output.numel())
      throw CommError("all_to_all on group " + name() + ": input holds " +
                      std::to_string(input.numel()) + " elements but output " +
                      std::to_string(output.numel()));
    Part p = part(OpKind::AllToAll, label, input, output);
    p.counts = comm::split_counts(name(), OpKind::AllToAll, input.numel(), size(), send_counts);
    p.recv_counts =
        comm::split_counts(name(), OpKind::AllToAll, output.numel(), size(), recv_counts);
    if (input.data == output.data && input.numel() > 0)
      throw CommError("all_to_all on group " + name() + ": input and output must not alias");
    // Gloo runs alltoall for an equal split and alltoallv for explicit
    // counts; members mixing the two do not meet.
    p.signature = std::string("all_to_all(") + dtype_name(input.dtype) +
                  (send_counts.empty() ? ", equal split)" : ", explicit counts)");
    return s_->issue(rank_, std::move(p));
  }

  WorkPtr broadcast(const Tensor& data, int root, const std::string& label) override {
    check(OpKind::Broadcast, "data", data);
    if (root < 0 || root >= size())
      throw CommError("broadcast on group " + name() + ": root " + std::to_string(root) +
                      " is not a group rank (size " + std::to_string(size()) + ")");
    Part p = part(OpKind::Broadcast, label, data, data);
    p.root = root;
    p.signature = "broadcast(root " + std::to_string(root) + ", " + elems(data) + ")";
    return s_->issue(rank_, std::move(p));
  }

  WorkPtr barrier(const std::string& label) override {
    Part p = part(OpKind::Barrier, label, Tensor(), Tensor());
    p.bytes = 0;
    p.signature = "barrier";
    return s_->issue(rank_, std::move(p));
  }

  comm::CommStats stats() const override { return s_->stats[rank_].snapshot(); }

 private:
  void check(OpKind op, const char* which, const Tensor& t) const {
    comm::check_buffer(name(), op, which, t);
    if (t.device != Device::CPU)
      throw CommError(std::string(comm::op_name(op)) + " on group " + name() + ": " + which +
                      " is on " + device_name(t.device) +
                      "; the fake communicator moves host memory only");
  }
  void same_dtype(const char* op, const Tensor& in, const Tensor& out) const {
    if (in.dtype != out.dtype)
      throw CommError(std::string(op) + " on group " + name() + ": input and output dtypes differ");
  }
  static Part part(OpKind kind, const std::string& label, const Tensor& in, const Tensor& out) {
    Part p;
    p.kind = kind;
    p.label = label;
    p.in = in;
    p.out = out;
    p.bytes = in.nbytes();
    return p;
  }

  std::shared_ptr<FakeGroup::State> s_;
  const int rank_;
};

}  // namespace

// ----------------------------------------------------------------- groups --

std::shared_ptr<FakeGroup> FakeGroup::create(int size, std::string name, FakeGroupOptions opt) {
  if (size < 1)
    throw CommError("fake group " + name + ": size must be at least 1, got " +
                    std::to_string(size));
  if (opt.members.empty())
    for (int r = 0; r < size; ++r) opt.members.push_back(r);
  if (static_cast<int>(opt.members.size()) != size)
    throw CommError("fake group " + name + ": " + std::to_string(opt.members.size()) +
                    " members for size " + std::to_string(size));
  auto state = std::make_shared<State>(std::move(name), std::move(opt.members), opt.timeout);
  std::shared_ptr<FakeGroup> g(new FakeGroup());
  for (int r = 0; r < size; ++r)
    g->members_.push_back(std::make_shared<FakeCommunicator>(state, r));
  return g;
}

comm::CommunicatorPtr FakeGroup::member(int rank) const {
  if (rank < 0 || rank >= size())
    throw CommError("fake group: no rank " + std::to_string(rank) + " in a group of " +
                    std::to_string(size()));
  return members_[rank];
}

std::vector<FakeRankGroups> fake_grid(const comm::RankGrid& grid, FakeGroupOptions opt) {
  std::vector<FakeRankGroups> out(grid.world());
  const std::pair<const char*, comm::CommunicatorPtr FakeRankGroups::*> kinds[] = {
      {"world", &FakeRankGroups::world},
      {"dp", &FakeRankGroups::dp},
      {"sp", &FakeRankGroups::sp},
      {"wp", &FakeRankGroups::wp},
      {"wdp", &FakeRankGroups::wdp}};
  for (const auto& [kind, field] : kinds) {
    for (const std::vector<int>& members : grid.all(kind)) {
      FakeGroupOptions o = opt;
      o.members = members;
      auto g = FakeGroup::create(static_cast<int>(members.size()), kind, o);
      for (size_t i = 0; i < members.size(); ++i)
        out[members[i]].*field = g->member(static_cast<int>(i));
    }
  }
  return out;
}

void run_ranks(int n, const std::function<void(int rank)>& body) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace weft::testing
