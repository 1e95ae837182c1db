// weft_comm_bench: bus bandwidth of one collective (all_reduce, reduce_scatter
// or all_gather; sum, f32) on weft's Gloo communicator, one rank per process,
// started by weft-run or tests/bench/comm_allreduce.sh. Rank 0 prints one
// line per size:
//   weft <op> <bytes> <iters> <seconds per op> <bus GB/s>
// <bytes> is the full buffer (all-reduce data, reduce-scatter input,
// all-gather output); bus bandwidth as in nccl-tests: 2 (n-1)/n * bytes / time
// for all-reduce, (n-1)/n * bytes / time for the other two.
// Collectives are issued back to back without waiting, alternating between two
// buffers (as gradient buckets are distinct memory), so lanes can overlap them.
// WEFT_BENCH_LANES sets comm.lanes (default: GroupOptions' default);
// WEFT_BENCH_SERIAL=1 waits for each collective before issuing the next.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/process_groups.h"

using namespace weft;
using namespace weft::comm;

int main(int argc, char** argv) {
  int64_t max_bytes = argc > 1 ? std::atoll(argv[1]) : (256ll << 20);
  const std::string op = argc > 2 ? argv[2] : "all_reduce";
  if (op != "all_reduce" && op != "reduce_scatter" && op != "all_gather") {
    std::fprintf(stderr, "weft_comm_bench: op '%s' is not one of all_reduce, reduce_scatter, all_gather\n", op.c_str());
    return 1;
  }
  GroupOptions opt;
  opt.timeout = std::chrono::seconds(120);
  opt.rendezvous_timeout = std::chrono::seconds(60);
  if (const char* l = std::getenv("WEFT_BENCH_LANES")) opt.lanes = std::atoi(l);
  // WEFT_BENCH_SERIAL=1: wait for each collective before issuing the next
  // (torch-serial's pattern), instead of queueing them all.
  const bool serial = std::getenv("WEFT_BENCH_SERIAL") && std::string(std::getenv("WEFT_BENCH_SERIAL")) == "1";
  auto pg = init_process_groups(contract::parse_launch_env(current_environment()), opt);
  const int n = pg->world_size();
  constexpr int kBuffers = 2;
  std::vector<std::vector<float>> full(kBuffers, std::vector<float>(static_cast<size_t>(max_bytes / 4), 1.0f));
  std::vector<std::vector<float>> share(kBuffers, std::vector<float>(static_cast<size_t>(max_bytes / 4 / n + 1), 1.0f));
  for (int64_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
    const int64_t count = bytes / 4 / n * n;  // splits evenly
    auto issue = [&](int i) -> WorkPtr {
      const int b = i % kBuffers;
      Tensor f = Tensor::f32(full[b].data(), Shape{count});
      Tensor s = Tensor::f32(share[b].data(), Shape{count / n});
      if (op == "all_reduce") return pg->world->all_reduce(f, ReduceOp::Sum);
      if (op == "reduce_scatter") return pg->world->reduce_scatter(f, s, ReduceOp::Sum);
      return pg->world->all_gather(s, f);
    };
    // Same iteration count on every rank: about 256 MiB of payload per size.
    int iters = static_cast<int>(std::max<int64_t>(5, std::min<int64_t>(1000, (256ll << 20) / bytes)));
    for (int i = 0; i < 2; ++i) issue(i)->wait();
    pg->world->barrier()->wait();
    auto t0 = std::chrono::steady_clock::now();
    std::vector<WorkPtr> works;
    for (int i = 0; i < iters; ++i) {
      works.push_back(issue(i));
      if (serial) works.back()->wait();
    }
    for (auto& w : works) w->wait();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    const double factor = (op == "all_reduce" ? 2.0 : 1.0) * (n - 1) / n;
    double busbw = factor * static_cast<double>(count * 4) / secs / 1e9;
    if (pg->rank() == 0)
      std::printf("weft %s %lld %d %.9f %.4f\n", op.c_str(), static_cast<long long>(bytes), iters, secs, busbw);
    std::fflush(stdout);
  }
  return 0;
}
