// weft_comm_rank: one rank of a multi-process comm test. The gtests in this
// directory (and weft-run's tests) start N of these with the rank environment
// contract; each runs one scenario and exits with a code the test checks.
//   collectives SP WP [LANES]
//                       every collective on every group of the grid, issued on
//                       all groups before any wait; checked against references
//                       (support/collective_checks.h, which the fake also meets)
//   ordering LANES      collectives on overlapping memory, issued back to back
//                       so they land on different lanes: results as in issue order
//   express LANES       comm.simulate makes a 1 MiB all-reduce take 1.5 s; a
//                       4-byte all-reduce issued after it must finish first
//                       with lanes >= 2 (express lane), and after it with 1
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

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/process_groups.h"
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

int scenario_collectives(int sp, int wp, int lanes) {
  GroupOptions opt;
  opt.sp = sp;
  opt.wp = wp;
  opt.lanes = lanes;
  opt.timeout = std::chrono::seconds(20);
  opt.rendezvous_timeout = std::chrono::seconds(30);
  auto pg = init_process_groups(contract::parse_launch_env(current_environment()), opt);
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
int scenario_ordering(int lanes) {
  GroupOptions opt;
  opt.lanes = lanes;
  opt.timeout = std::chrono::seconds(20);
  opt.rendezvous_timeout = std::chrono::seconds(30);
  auto pg = init_process_groups(contract::parse_launch_env(current_environment()), opt);
  const int n = pg->world_size(), me = pg->rank();
  const int64_t big = 1 << 20;  // 4 MiB: a bulk lane
  for (int round = 0; round < 3; ++round) {
    std::vector<float> a(big), b(big);
    for (int64_t i = 0; i < big; ++i) a[i] = static_cast<float>((i % 7) + me), b[i] = 1.0f;
    Tensor ta = Tensor::f32(a.data(), Shape{big}), tb = Tensor::f32(b.data(), Shape{big});
    std::vector<WorkPtr> w;
    w.push_back(pg->world->all_reduce(ta, ReduceOp::Sum, "a"));          // a = sum_r (i%7 + r)
    w.push_back(pg->world->all_reduce(tb, ReduceOp::Sum, "b"));          // independent: b = n
    w.push_back(pg->world->all_reduce(ta, ReduceOp::Sum, "a again"));    // a *= n
    w.push_back(pg->world->all_reduce(ta.slice0(0, 4), ReduceOp::Sum, "a head"));  // express: *= n
    // Reads b's head once b's reduction wrote it (express lane, gathered).
    std::vector<float> heads(4 * n, 0.0f);
    w.push_back(pg->world->all_gather(tb.slice0(0, 4), Tensor::f32(heads.data(), Shape{4 * n}), {}, "b heads"));
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
  std::printf("rank %d: ordering with %d lanes, %d failures\n", me, lanes, g_failures);
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
    if (mode == "ordering" && argc == 3) return scenario_ordering(std::stoi(argv[2]));
    if (mode == "express" && argc == 3) return scenario_express(std::stoi(argv[2]));
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
  std::fprintf(stderr, "usage: weft_comm_rank collectives SP WP [LANES] | ordering LANES | express LANES | rendezvous | formed | "
                       "die K MS [LANES] | hang K MS [LANES]\n");
  return 2;
}
