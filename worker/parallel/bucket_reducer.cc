#include "parallel/bucket_reducer.h"

#include <utility>

#include "parallel/host_scalars.h"

namespace weft {

BucketReducer::BucketReducer(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr dp,
                             BucketCollective collective, BucketEngineOptions options)
    : buf_(buffer),
      dp_(dp),
      engine_(std::move(buffer), std::move(dp), collective, options),
      waits_(buf_->device()) {}

void BucketReducer::broadcast_parameters() {
  dp_->broadcast(buf_->flat_params(), 0, "initial parameters")->wait();
}

SyncReport BucketReducer::report() const {
  SyncReport r;
  r.group = dp_.get();
  r.last_step = &stats_;
  r.bucket_count = engine_.size();
  r.bucket_cap_mb = engine_.sizing().cap_mb;
  return r;
}

comm::WorkPtr BucketReducer::average_loss(double loss) {
  loss_wire_ = static_cast<float>(loss);
  return all_reduce_host(*dp_, buf_->device(), &loss_wire_, 1, comm::ReduceOp::Avg, "loss");
}

void BucketReducer::reset_gathers() {
  ag_.assign(engine_.size(), nullptr);
  ag_issued_.assign(engine_.size(), {});
}

void BucketReducer::launch_gather(int index) {
  const Bucket& b = engine_.buckets()[index];
  const int n = dp_->size(), me = dp_->rank();
  Tensor p = buf_->flat_params();
  ag_issued_[index] = CommSpans::Clock::now();
  ag_[index] =
      dp_->all_gather(p.slice0(b.shard_begin(me, n), b.shard_end(me, n)), p.slice0(b.begin, b.end),
                      engine_.shard_counts(index), "gather bucket " + std::to_string(index));
}

void BucketReducer::wait_gather(int index) {
  if (!ag_[index]) return;
  waits_.time([&] { ag_[index]->wait(); });
  stats_.spans.add(ag_issued_[index], *ag_[index]);
  stats_.comm_seconds = stats_.spans.busy_seconds();
  ag_[index] = nullptr;
}

void BucketReducer::wait_gathers() {
  for (int b = 0; b < engine_.size(); ++b) wait_gather(b);
}

}  // namespace weft
