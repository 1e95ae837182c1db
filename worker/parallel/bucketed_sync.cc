#include "parallel/bucketed_sync.h"

#include <utility>

#include "parallel/host_scalars.h"

namespace weft {

BucketedSync::BucketedSync(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr dp,
                           BucketCollective collective, BucketEngineOptions options)
    : buf_(buffer),
      dp_(dp),
      engine_(std::move(buffer), std::move(dp), collective, options),
      waits_(buf_->device()) {}

void BucketedSync::start() { dp_->broadcast(buf_->flat_params(), 0, "initial parameters")->wait(); }

comm::WorkPtr BucketedSync::average_loss(double loss) {
  loss_wire_ = static_cast<float>(loss);
  return all_reduce_host(*dp_, buf_->device(), &loss_wire_, 1, comm::ReduceOp::Avg, "loss");
}

void BucketedSync::reset_gathers() {
  ag_.assign(engine_.size(), nullptr);
  ag_issued_.assign(engine_.size(), {});
}

void BucketedSync::launch_gather(int index) {
  const Bucket& b = engine_.buckets()[index];
  const int n = dp_->size(), me = dp_->rank();
  Tensor p = buf_->flat_params();
  ag_issued_[index] = CommSpans::Clock::now();
  ag_[index] = dp_->all_gather(p.slice0(b.shard_begin(me, n), b.shard_end(me, n)), p.slice0(b.begin, b.end),
                               engine_.shard_counts(index), "gather bucket " + std::to_string(index));
}

void BucketedSync::wait_gather(int index) {
  if (!ag_[index]) return;
  waits_.time([&] { ag_[index]->wait(); });
  stats_.spans.add(ag_issued_[index], *ag_[index]);
  stats_.comm_seconds = stats_.spans.busy_seconds();
  ag_[index] = nullptr;
}

void BucketedSync::wait_gathers() {
  for (int b = 0; b < engine_.size(); ++b) wait_gather(b);
}

}  // namespace weft
