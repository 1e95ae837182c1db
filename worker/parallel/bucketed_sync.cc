#include "parallel/bucketed_sync.h"

#include <utility>

#include "parallel/host_scalars.h"

namespace weft {

BucketedSync::BucketedSync(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr dp,
                           BucketCollective collective, BucketEngineOptions options)
    : buf_(buffer), dp_(dp), engine_(std::move(buffer), std::move(dp), collective, options) {}

void BucketedSync::start() { dp_->broadcast(buf_->flat_params(), 0, "initial parameters")->wait(); }

comm::WorkPtr BucketedSync::average_loss(double loss) {
  loss_wire_ = static_cast<float>(loss);
  return all_reduce_host(*dp_, buf_->device(), &loss_wire_, 1, comm::ReduceOp::Avg, "loss");
}

}  // namespace weft
