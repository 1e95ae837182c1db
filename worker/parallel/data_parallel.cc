#include "parallel/data_parallel.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "kernels/stream_timer.h"
#include "parallel/host_scalars.h"

namespace weft {

DataParallelOptions data_parallel_options(const ParallelConfig& p) {
  DataParallelOptions o;
  o.bucket_cap_mb = p.bucket_cap_mb;
  o.first_bucket_mb = p.first_bucket_mb;
  o.overlap = p.overlap;
  o.bf16_wire = p.bf16_wire;
  return o;
}

DataParallel::DataParallel(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr dp,
                           DataParallelOptions opt, const OptimConfig& optim)
    : buf_(std::move(buffer)), dp_(std::move(dp)), opt_dp_(opt), opt_(replicated_adamw(*buf_, optim)) {
  if (opt_dp_.bf16_wire)
    wire_ = Buffer(static_cast<size_t>(buf_->numel()) * dtype_size(DType::BF16), buf_->device());
  sizing_ = resolve_bucket_sizing(buf_->params(), opt_dp_.bucket_cap_mb, opt_dp_.first_bucket_mb, dp_->size());
  plan(sizing_.cap_mb);
}

std::string DataParallel::describe() const {
  return fmt::format("data parallel over {} ranks (group {}), bucket {}, {}, overlap {}, wire {}", dp_->size(),
                     dp_->name(), sizing_.describe(), describe_buckets(buckets_), opt_dp_.overlap ? "on" : "off",
                     opt_dp_.bf16_wire ? "bf16" : "fp32");
}

void DataParallel::rebucket(double cap_mb, int64_t step) {
  plan(cap_mb);
  spdlog::info("step {}: bucket cap now {:.3g} MiB, {}", step + 1, cap_mb, describe_buckets(buckets_));
}

void DataParallel::plan(double cap_mb) {
  WEFT_CHECK(cap_mb > 0, "bucket cap must be positive");
  sizing_ = sizing_.with_cap(cap_mb);
  buckets_ = plan_buckets(buf_->params(), cap_mb, sizing_.first_bucket_mb, dp_->size(),
                          sizing_.last_bucket_mb);
  bucket_of_param_.assign(buf_->params().size(), 0);
  for (const Bucket& b : buckets_)
    for (int p = b.first_param; p <= b.last_param; ++p) bucket_of_param_[p] = b.index;
  pending_.assign(buckets_.size(), 0);
  works_.assign(buckets_.size(), nullptr);
  issued_.assign(buckets_.size(), {});
}

void DataParallel::start() {
  // Start from rank 0's weights whatever happened before (DDP does the same).
  dp_->broadcast(buf_->flat_params(), 0, "initial parameters")->wait();
}

void DataParallel::load_full_weights(const ParamAndGradBuffer& full) { load_replicated_weights(*buf_, opt_, full); }

void DataParallel::gather_full_weights(ParamAndGradBuffer& full) { store_replicated_weights(*buf_, opt_, full); }

void DataParallel::begin_micro_batch(bool last) {
  sync_ = last;
  next_launch_ = 0;
  for (const Bucket& b : buckets_) {
    pending_[b.index] = b.num_params();
    works_[b.index] = nullptr;
  }
  if (last) stats_ = StepCommStats{};
}

void DataParallel::on_grad_ready(int param) {
  if (!sync_) return;  // no_sync: keep accumulating locally
  int b = bucket_of_param_.at(param);
  WEFT_CHECK(pending_[b] > 0, "parameter " + buf_->params()[param].name + " reported ready twice");
  --pending_[b];
  if (opt_dp_.overlap) launch_ready_in_order();
}

void DataParallel::launch_ready_in_order() {
  while (next_launch_ < static_cast<int>(buckets_.size()) && pending_[next_launch_] == 0)
    launch(next_launch_++);
}

void DataParallel::launch(int index) {
  const Bucket& b = buckets_[index];
  const std::string label = "bucket " + std::to_string(index);
  Tensor grads = buf_->flat_grads().slice0(b.begin, b.end);
  issued_[index] = CommSpans::Clock::now();
  if (opt_dp_.bf16_wire) {
    Tensor wire = wire_.as(DType::BF16, {buf_->numel()}).slice0(b.begin, b.end);
    ops::cast(wire, grads);
    works_[index] = dp_->all_reduce(wire, comm::ReduceOp::Avg, label);
  } else {
    works_[index] = dp_->all_reduce(grads, comm::ReduceOp::Avg, label);
  }
}

double DataParallel::finish_micro_batch(double loss) {
  if (!sync_) return loss;
  // Queued behind the gradient buckets, so it costs no round trip of its own:
  // it completes while wait_buckets waits anyway.
  loss_wire_ = static_cast<float>(loss);
  comm::WorkPtr loss_work = all_reduce_host(*dp_, buf_->device(), &loss_wire_, 1, comm::ReduceOp::Avg, "loss");
  wait_buckets();
  loss_work->wait();
  return loss_wire_;
}

void DataParallel::wait_buckets() {
  for (int p : pending_)
    WEFT_CHECK(p == 0, "backward finished with parameters whose gradients were never reported");
  // Exposed time: from the end of backward compute until every bucket is
  // reduced (the launches below are part of it when overlap is off), as the
  // compute stream sees it (on a GPU the waits below only order the stream).
  ops::StreamTimer exposed(buf_->device());
  launch_ready_in_order();
  stats_.bucket_seconds.assign(buckets_.size(), 0);
  for (const Bucket& b : buckets_) {
    works_[b.index]->wait();
    if (opt_dp_.bf16_wire)
      ops::cast(buf_->flat_grads().slice0(b.begin, b.end),
                wire_.as(DType::BF16, {buf_->numel()}).slice0(b.begin, b.end));
    on_bucket_reduced(b.index);
  }
  stats_.exposed_seconds = exposed.stop();  // on a GPU: every bucket's events have completed now
  for (const Bucket& b : buckets_) {
    stats_.bucket_seconds[b.index] = works_[b.index]->comm_seconds();
    stats_.spans.add(issued_[b.index], *works_[b.index]);
    works_[b.index] = nullptr;
  }
  stats_.comm_seconds = stats_.spans.busy_seconds();
}

double DataParallel::clip_and_step(double lr, double max_norm) {
  return clip_and_step_replicated(*buf_, opt_, lr, max_norm, norm_scope_);
}

StateBytes DataParallel::state_bytes() const {
  return {static_cast<int64_t>(buf_->param_bytes()), static_cast<int64_t>(buf_->grad_bytes()),
          opt_.state_bytes()};
}

}  // namespace weft
