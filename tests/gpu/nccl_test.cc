// The NCCL communicator on one GPU (one rank per GPU, so a single-rank
// group): every collective runs on the comm stream, is ordered against the
// compute stream, and leaves the values a one-member group must leave.
#include <gtest/gtest.h>

#include "gpu_test_util.h"

#ifdef WEFT_HAVE_NCCL
#include "comm/comm_context.h"
#include "comm/nccl_communicator.h"
#include "comm/solo_communicator.h"

#include <cstdio>

#include <cuda_runtime.h>
#endif

namespace weft::gpu_test {
namespace {

#ifdef WEFT_HAVE_NCCL
TEST(NcclSingleRank, EveryCollectiveKeepsASingleRanksValues) {
  WEFT_REQUIRE_GPU();
  comm::CommContext ctx(std::chrono::milliseconds(60000), comm::FailurePolicy::Throw);
  auto nccl = comm::NcclCommunicator::create(ctx, nullptr, "dp", {0}, 0);
  nccl->set_compute_stream(cuda::CudaContext::current().compute_stream());
  ASSERT_EQ(nccl->size(), 1);
  for (DType dt : {DType::F32, DType::BF16}) {
    const std::vector<float> x = round_to(dt, random_normal_f32(1000, 7));
    OwnedTensor a = gpu_tensor(x, dt, {1000});
    nccl->all_reduce(a, comm::ReduceOp::Sum, "sum")->wait();
    nccl->all_reduce(a, comm::ReduceOp::Avg, "avg")->wait();
    nccl->broadcast(a, 0, "bcast")->wait();
    expect_close("all_reduce/broadcast", x, download(a), Tol{0, 0});
    OwnedTensor out = gpu_empty(dt, {1000});
    poison(out);
    nccl->reduce_scatter(a, out, comm::ReduceOp::Sum)->wait();
    expect_close("reduce_scatter", x, download(out), Tol{0, 0});
    poison(out);
    nccl->all_gather(a, out)->wait();
    expect_close("all_gather", x, download(out), Tol{0, 0});
    nccl->barrier()->wait();
  }
  // The Work handles are gone and the watchdog may not have polled yet: the
  // stats must still count every collective once the comm stream is done.
  ASSERT_EQ(cudaStreamSynchronize(nccl->comm_stream()), cudaSuccess);
  comm::CommStats s = nccl->stats();
  EXPECT_EQ(s.by_op.at("all_reduce").count, 4u);
  EXPECT_GT(s.by_op.at("all_reduce").bytes, 0u);
  EXPECT_GT(s.by_op.at("all_reduce").seconds, 0.0);
  EXPECT_EQ(s.by_op.at("reduce_scatter").count, 2u);
  EXPECT_EQ(s.by_op.at("all_gather").count, 2u);
  EXPECT_EQ(s.by_op.at("broadcast").count, 2u);
  EXPECT_EQ(s.by_op.at("barrier").count, 2u);
}

// What a one-GPU run uses instead of single-rank NCCL communicators: the
// same values by copies on the compute stream, and no NCCL resources. Beside
// it, for the record, what one single-rank NCCL communicator costs in device
// memory (docs/gpu-performance.md, "Memory").
TEST(SoloCommunicatorGpu, CopiesOnTheComputeStreamWithoutNcclResources) {
  WEFT_REQUIRE_GPU();
  size_t free_before = 0, free_after = 0, total = 0;
  comm::SoloCommunicator solo("sp", 0, cuda::CudaContext::current().compute_stream());
  for (DType dt : {DType::F32, DType::BF16}) {
    const std::vector<float> x = round_to(dt, random_normal_f32(100000, 9));
    OwnedTensor a = gpu_tensor(x, dt, {100000});
    solo.all_reduce(a, comm::ReduceOp::Avg)->wait();
    solo.broadcast(a, 0)->wait();
    OwnedTensor out = gpu_empty(dt, {100000});
    for (int op = 0; op < 3; ++op) {
      poison(out);
      (op == 0 ? solo.reduce_scatter(a, out, comm::ReduceOp::Sum) : op == 1 ? solo.all_gather(a, out) : solo.all_to_all(a, out))
          ->wait();
      expect_close("solo op " + std::to_string(op), x, download(out), Tol{0, 0});
    }
  }
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  {
    comm::CommContext ctx(std::chrono::milliseconds(60000), comm::FailurePolicy::Throw);
    auto nccl = comm::NcclCommunicator::create(ctx, nullptr, "dp", {0}, 0);
    nccl->set_compute_stream(cuda::CudaContext::current().compute_stream());
    OwnedTensor a = gpu_tensor(std::vector<float>(1024, 1.0f), DType::F32, {1024});
    nccl->all_reduce(a, comm::ReduceOp::Sum)->wait();
    ASSERT_EQ(cudaStreamSynchronize(nccl->comm_stream()), cudaSuccess);
    ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
    std::printf("one single-rank NCCL communicator after its first all-reduce: %.0f MiB of device memory\n",
                (static_cast<double>(free_before) - static_cast<double>(free_after)) / 1048576.0);
  }
}
#else
TEST(NcclSingleRank, EveryCollectiveKeepsASingleRanksValues) {
  GTEST_SKIP() << "weft was built without NCCL";
}
#endif

}  // namespace
}  // namespace weft::gpu_test
