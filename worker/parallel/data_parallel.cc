#include "parallel/data_parallel.h"

#include <spdlog/spdlog.h>

#include "comm/bf16.h"

namespace weft {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

DataParallel::DataParallel(const std::vector<ParamInfo>& params, Tensor flat_grads,
                           comm::CommunicatorPtr dp, DataParallelOptions opt)
    : params_(params), grads_(flat_grads), dp_(std::move(dp)), opt_(opt) {
  WEFT_CHECK(grads_.dtype == DType::F32, "gradient buffer must be fp32");
  if (opt_.bf16_wire) wire_.resize(static_cast<size_t>(grads_.numel()));
  rebuild(opt_.bucket_cap_mb);
}

void DataParallel::rebuild(double cap_mb) {
  opt_.bucket_cap_mb = cap_mb;
  buckets_ = plan_buckets(params_, cap_mb, opt_.first_bucket_mb, dp_->size());
  bucket_of_param_.assign(params_.size(), 0);
  for (const Bucket& b : buckets_)
    for (int p = b.first_param; p <= b.last_param; ++p) bucket_of_param_[p] = b.index;
  pending_.assign(buckets_.size(), 0);
  works_.assign(buckets_.size(), nullptr);
}

void DataParallel::request_bucket_cap(double cap_mb) {
  WEFT_CHECK(cap_mb > 0, "bucket cap must be positive");
  requested_cap_mb_ = cap_mb;
}

StepAgreement DataParallel::agree_at_step_boundary(int64_t step, bool stop_requested) {
  // Sum over ranks of {stop, rank-0 cap request}: only rank 0 contributes the cap.
  float msg[2] = {stop_requested ? 1.0f : 0.0f,
                  dp_->rank() == 0 ? static_cast<float>(requested_cap_mb_) : 0.0f};
  dp_->all_reduce(Tensor::f32(msg, {2}), comm::ReduceOp::Sum, "step agreement")->wait();
  StepAgreement a;
  a.stop = msg[0] > 0;
  const double cap = msg[1];
  if (cap > 0 && cap != opt_.bucket_cap_mb) {
    rebuild(cap);
    a.rebucketed = true;
    spdlog::info("step {}: bucket cap now {:.3g} MiB, {}", step + 1, cap, describe_buckets(buckets_));
  }
  requested_cap_mb_ = 0;
  return a;
}

void DataParallel::begin_micro_batch(bool sync) {
  sync_ = sync;
  next_launch_ = 0;
  for (const Bucket& b : buckets_) {
    pending_[b.index] = b.num_params();
    works_[b.index] = nullptr;
  }
  if (sync) stats_ = StepCommStats{};
}

void DataParallel::on_grad_ready(int param) {
  if (!sync_) return;  // no_sync: keep accumulating locally
  int b = bucket_of_param_.at(param);
  WEFT_CHECK(pending_[b] > 0, "parameter " + params_[param].name + " reported ready twice");
  --pending_[b];
  if (opt_.overlap) launch_ready_in_order();
}

void DataParallel::launch_ready_in_order() {
  while (next_launch_ < static_cast<int>(buckets_.size()) && pending_[next_launch_] == 0)
    launch(next_launch_++);
}

void DataParallel::launch(int index) {
  const Bucket& b = buckets_[index];
  const std::string label = "bucket " + std::to_string(index);
  if (opt_.bf16_wire) {
    float* g = grads_.f32();
    uint16_t* w = wire_.data();
    for (int64_t i = b.begin; i < b.end; ++i) w[i] = comm::f32_to_bf16(g[i]);
    Tensor t(w + b.begin, DType::BF16, {b.numel()});
    works_[index] = dp_->all_reduce(t, comm::ReduceOp::Avg, label);
  } else {
    works_[index] = dp_->all_reduce(grads_.slice0(b.begin, b.end), comm::ReduceOp::Avg, label);
  }
}

void DataParallel::finish_micro_batch() {
  if (!sync_) return;
  for (int p : pending_)
    WEFT_CHECK(p == 0, "backward finished with parameters whose gradients were never reported");
  // Exposed time: from the end of backward compute until every bucket is
  // reduced (the launches below are part of it when overlap is off).
  const auto t0 = Clock::now();
  launch_ready_in_order();
  stats_.bucket_seconds.assign(buckets_.size(), 0);
  for (const Bucket& b : buckets_) {
    works_[b.index]->wait();
    if (opt_.bf16_wire) {
      float* g = grads_.f32();
      const uint16_t* w = wire_.data();
      for (int64_t i = b.begin; i < b.end; ++i) g[i] = comm::bf16_to_f32(w[i]);
    }
  }
  stats_.exposed_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (const Bucket& b : buckets_) {
    stats_.bucket_seconds[b.index] = works_[b.index]->comm_seconds();
    stats_.comm_seconds += stats_.bucket_seconds[b.index];
    works_[b.index] = nullptr;
  }
}

}  // namespace weft
