// weft_comm_rank: one rank of a multi-process comm test. The gtests in this
// directory (and weft-run's tests) start N of these with the rank environment
// contract; each runs one scenario and exits with a code the test checks.
//   collectives SP WP   every collective on every group of the grid, issued on
//                       all groups before any wait; checked against references
//                       (support/collective_checks.h, which the fake also meets)
//   rendezvous          init, barrier, all-reduce of the ranks
//   die K MS            timeout MS; rank K is SIGKILLed after the first
//                       all-reduce, the others keep reducing (must exit 3)
//   hang K MS           timeout MS; rank K stops participating (others exit 3)
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

int scenario_collectives(int sp, int wp) {
  GroupOptions opt;
  opt.sp = sp;
  opt.wp = wp;
  opt.timeout = std::chrono::seconds(20);
  opt.rendezvous_timeout = std::chrono::seconds(30);
  auto pg = init_process_groups(read_process_env(current_environment()), opt);
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
  auto pg = init_process_groups(read_process_env(current_environment()), opt);
  float x = static_cast<float>(pg->rank());
  pg->world->barrier()->wait();
  pg->world->all_reduce(Tensor::f32(&x, Shape{1}), ReduceOp::Sum)->wait();
  int n = pg->world_size();
  expect_near("sum of ranks", x, n * (n - 1) / 2.0);
  std::printf("rank %d of %d: sum of ranks %g\n", pg->rank(), n, x);
  return g_failures ? 10 : 0;
}

int scenario_failure(bool die, int victim, int timeout_ms) {
  GroupOptions opt;
  opt.timeout = std::chrono::milliseconds(timeout_ms);
  opt.rendezvous_timeout = std::chrono::seconds(20);
  auto pg = init_process_groups(read_process_env(current_environment()), opt);
  std::vector<float> data(1 << 16, 1.0f);
  Tensor t = Tensor::f32(data.data(), Shape{static_cast<int64_t>(data.size())});
  for (int step = 0;; ++step) {
    pg->context().set_step(step);
    if (step == 1 && pg->rank() == victim) {
      std::fflush(stdout);
      if (die) raise(SIGKILL);
      pause();  // hang: stop participating without closing connections
    }
    pg->world->all_reduce(t, ReduceOp::Avg, "bucket 0")->wait();
    if (step > 100000) return 10;  // unreachable unless failure detection is broken
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "collectives" && argc == 4) return scenario_collectives(std::stoi(argv[2]), std::stoi(argv[3]));
    if (mode == "rendezvous") return scenario_rendezvous();
    if ((mode == "die" || mode == "hang") && argc == 4)
      return scenario_failure(mode == "die", std::stoi(argv[2]), std::stoi(argv[3]));
  } catch (const RendezvousError& e) {
    std::fprintf(stderr, "weft_comm_rank: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft_comm_rank: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: weft_comm_rank collectives SP WP | rendezvous | die K MS | hang K MS\n");
  return 2;
}
