// weft_comm_bench: all-reduce (sum, f32) bus bandwidth of weft's Gloo
// communicator, one rank per process, started by weft-run or
// tests/bench/comm_allreduce.sh. Rank 0 prints one line per size:
//   weft <bytes> <iters> <seconds per op> <bus GB/s>
// bus bandwidth = 2 (n-1)/n * bytes / time, as in nccl-tests.
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
  GroupOptions opt;
  opt.timeout = std::chrono::seconds(120);
  opt.rendezvous_timeout = std::chrono::seconds(60);
  auto pg = init_process_groups(read_process_env(current_environment()), opt);
  int n = pg->world_size();
  std::vector<float> buf(static_cast<size_t>(max_bytes / 4), 1.0f);
  for (int64_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
    int64_t count = bytes / 4;
    Tensor t = Tensor::f32(buf.data(), Shape{count});
    // Same iteration count on every rank: about 256 MiB of payload per size.
    int iters = static_cast<int>(std::max<int64_t>(5, std::min<int64_t>(1000, (256ll << 20) / bytes)));
    for (int i = 0; i < 2; ++i) pg->world->all_reduce(t, ReduceOp::Sum)->wait();
    pg->world->barrier()->wait();
    auto t0 = std::chrono::steady_clock::now();
    WorkPtr last;
    for (int i = 0; i < iters; ++i) last = pg->world->all_reduce(t, ReduceOp::Sum);
    last->wait();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    double busbw = 2.0 * (n - 1) / n * static_cast<double>(bytes) / secs / 1e9;
    if (pg->rank() == 0) std::printf("weft %lld %d %.9f %.4f\n", static_cast<long long>(bytes), iters, secs, busbw);
    std::fflush(stdout);
  }
  return 0;
}
