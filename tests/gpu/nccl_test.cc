// The NCCL communicator on one GPU (one rank per GPU, so a single-rank
// group): every collective runs on the comm stream, is ordered against the
// compute stream, and leaves the values a one-member group must leave.
#include <gtest/gtest.h>

#include "gpu_test_util.h"

#ifdef WEFT_HAVE_NCCL
#include "comm/comm_context.h"
#include "comm/nccl_communicator.h"

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
#else
TEST(NcclSingleRank, EveryCollectiveKeepsASingleRanksValues) {
  GTEST_SKIP() << "weft was built without NCCL";
}
#endif

}  // namespace
}  // namespace weft::gpu_test
