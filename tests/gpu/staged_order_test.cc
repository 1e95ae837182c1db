// Host-staged collectives on one GPU, two processes (comm.backend: gloo with
// device: cuda): a collective issued while a slow kernel queued before it on
// the compute stream still writes its buffer must see the kernel's write
// first. The all-reduce's copy out must wait for the kernel (else it sends
// the old values); a broadcast's receivers copy nothing out, and their copy
// back must still land after the kernel (else the kernel's late write
// replaces the broadcast value). The CPU twin is
// Ordering.StagedCollectivesWaitForComputeQueuedBeforeThem (a fake device).
//
// The test starts this same binary twice as ranks 0 and 1 (a rendezvous on a
// loopback port); WEFT_STAGED_GPU_RANK marks the children.
#ifdef WEFT_HAVE_CUDA

#include <gtest/gtest.h>

#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "comm/process_groups.h"
#include "gpu/gpu_test_util.h"
#include "kernels/ops.h"
#include "support/net.h"
#include "support/run_process.h"

namespace weft::gpu_test {
namespace {

// One rank's body; returns failures (0: passed).
int staged_rank() {
  comm::GroupOptions opt;
  opt.backend = contract::CommBackend::Gloo;
  opt.device = Device::CUDA;
  opt.timeout = std::chrono::seconds(60);
  opt.rendezvous_timeout = std::chrono::seconds(60);
  opt.policy = comm::FailurePolicy::Throw;
  opt.cuda_compute_stream = [] { return static_cast<void*>(cuda::CudaContext::current().compute_stream()); };
  auto pg = comm::init_process_groups(contract::parse_launch_env(comm::current_environment()), opt);
  const int me = pg->rank(), n = pg->world_size();
  cudaStream_t compute = cuda::CudaContext::current().compute_stream();

  // The slow kernel: tens of ms of f32 matmuls, then a copy into the buffer,
  // all queued on the compute stream; the host returns at once.
  const int64_t m = 4096;
  OwnedTensor a = gpu_tensor(random_normal_f32(m * m, 71), DType::F32, {m, m});
  OwnedTensor c = gpu_empty(DType::F32, {m, m});
  ops::matmul(c.t, a, a, false, false);  // warm-up (cuBLASLt load)
  download(c.t);

  const int64_t len = 1 << 16;
  int failures = 0;
  for (int round = 0; round < 3; ++round) {
    OwnedTensor x = gpu_tensor(std::vector<float>(len, -1.0f), DType::F32, {len});
    OwnedTensor y = gpu_tensor(std::vector<float>(len, -1.0f), DType::F32, {len});
    OwnedTensor x_late = gpu_tensor(std::vector<float>(len, me == 0 ? 7.0f : 0.0f), DType::F32, {len});
    OwnedTensor y_late = gpu_tensor(std::vector<float>(len, static_cast<float>(me + 1)), DType::F32, {len});
    download(x_late.t);  // everything uploaded before the timed part
    // The receiver's kernel runs longer than the root's: without the
    // ordering its write would land after the broadcast's copy back.
    for (int i = 0; i < (me == 0 ? 2 : 60); ++i) ops::matmul(c.t, a, a, false, false);
    cudaMemcpyAsync(x.t.data, x_late.t.data, len * sizeof(float), cudaMemcpyDeviceToDevice, compute);
    comm::WorkPtr b = pg->world->broadcast(x.t, 0, "broadcast after a slow kernel");
    for (int i = 0; i < 30; ++i) ops::matmul(c.t, a, a, false, false);
    cudaMemcpyAsync(y.t.data, y_late.t.data, len * sizeof(float), cudaMemcpyDeviceToDevice, compute);
    comm::WorkPtr r = pg->world->all_reduce(y.t, comm::ReduceOp::Sum, "all-reduce after a slow kernel");
    b->wait();
    r->wait();
    const std::vector<float> xs = download(x.t), ys = download(y.t);
    const float want_y = n * (n + 1) / 2.0f;
    for (int64_t i = 0; i < len; ++i) {
      if (xs[i] != 7.0f || ys[i] != want_y) {
        std::fprintf(stderr, "rank %d round %d: x[%lld] = %g (want 7), y[%lld] = %g (want %g)\n", me, round,
                     static_cast<long long>(i), xs[i], static_cast<long long>(i), ys[i], want_y);
        ++failures;
        break;
      }
    }
  }
  const comm::CommStats st = pg->world->stats();
  std::printf("rank %d: %llu staged collectives, %llu bytes staged, %d failures\n", me,
              static_cast<unsigned long long>(st.staged.count), static_cast<unsigned long long>(st.staged.bytes),
              failures);
  if (st.staged.count < 6) ++failures;  // 2 a round went through host memory
  return failures;
}

TEST(StagedOnOneGpu, CollectivesWaitForASlowKernelBeforeThem) {
  if (std::getenv("WEFT_STAGED_GPU_RANK")) {
    WEFT_REQUIRE_GPU();
    int failures = -1;
    try {
      failures = staged_rank();
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
    EXPECT_EQ(failures, 0);
    return;
  }
  WEFT_REQUIRE_GPU();
  const std::string port = std::to_string(weft::testing::free_port());
  auto rank = [&](int r) {
    return weft::testing::run_process(
        {"/proc/self/exe", "--gtest_filter=StagedOnOneGpu.CollectivesWaitForASlowKernelBeforeThem"},
        {"WEFT_STAGED_GPU_RANK=1", "RANK=" + std::to_string(r), "WORLD_SIZE=2", "LOCAL_RANK=" + std::to_string(r),
         "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "WEFT_RDZV_TOKEN=staged-gpu-test",
         "WEFT_ATTEMPT=0"},
        0, "", std::chrono::seconds(120));
  };
  auto r0 = std::async(std::launch::async, rank, 0);
  auto r1 = std::async(std::launch::async, rank, 1);
  const auto a = r0.get(), b = r1.get();
  EXPECT_EQ(a.code, 0) << a.output;
  EXPECT_EQ(b.code, 0) << b.output;
  EXPECT_TRUE(weft::testing::has(a.output, "[  PASSED  ] 1 test")) << a.output;  // not skipped
}

}  // namespace
}  // namespace weft::gpu_test

#endif
