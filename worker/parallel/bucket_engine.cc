#include "parallel/bucket_engine.h"

#include <chrono>

#include <fmt/format.h>

#include "kernels/ops.h"

namespace weft {

BucketEngine::BucketEngine(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr group,
                           BucketEngineOptions opt)
    : buf_(std::move(buffer)), group_(std::move(group)), opt_(opt) {
  if (opt_.bf16_wire)
    wire_ = Buffer(static_cast<size_t>(buf_->numel()) * dtype_size(DType::BF16), buf_->device());
  sizing_ = resolve_bucket_sizing(buf_->params(), opt_.bucket_cap_mb, opt_.first_bucket_mb, group_->size());
  plan(sizing_.cap_mb);
}

void BucketEngine::plan(double cap_mb) {
  WEFT_CHECK(cap_mb > 0, "bucket cap must be positive");
  sizing_ = sizing_.with_cap(cap_mb);
  buckets_ = plan_buckets(buf_->params(), cap_mb, sizing_.first_bucket_mb, group_->size(),
                          sizing_.last_bucket_mb);
  bucket_of_param_.assign(buf_->params().size(), 0);
  for (const Bucket& b : buckets_)
    for (int p = b.first_param; p <= b.last_param; ++p) bucket_of_param_[p] = b.index;
  pending_.assign(buckets_.size(), 0);
  works_.assign(buckets_.size(), nullptr);
  issued_.assign(buckets_.size(), {});
  next_launch_ = 0;
}

std::string BucketEngine::describe() const {
  return fmt::format("bucket {}, {}", sizing_.describe(), describe_buckets(buckets_));
}

void BucketEngine::begin_micro_batch() {
  next_launch_ = 0;
  for (const Bucket& b : buckets_) {
    pending_[b.index] = b.num_params();
    works_[b.index] = nullptr;
  }
}

void BucketEngine::mark_ready(int param, bool launch) {
  const int b = bucket_of_param_.at(param);
  WEFT_CHECK(pending_[b] > 0, "parameter " + buf_->params()[param].name + " reported ready twice");
  --pending_[b];
  if (launch) launch_ready_in_order();
}

void BucketEngine::launch_ready_in_order() {
  while (next_launch_ < size() && pending_[next_launch_] == 0) launch(next_launch_++);
}

void BucketEngine::check_all_reported() const {
  for (int p : pending_)
    WEFT_CHECK(p == 0, "backward finished with parameters whose gradients were never reported");
}

std::vector<int64_t> BucketEngine::shard_counts(const Bucket& b) const {
  std::vector<int64_t> c(group_->size());
  for (int r = 0; r < group_->size(); ++r) c[r] = b.shard_end(r, group_->size()) - b.shard_begin(r, group_->size());
  return c;
}

Tensor BucketEngine::wire() const { return wire_.as(DType::BF16, {buf_->numel()}); }

void BucketEngine::launch(int index) {
  const Bucket& b = buckets_[index];
  const std::string label = "bucket " + std::to_string(index);
  Tensor g = buf_->flat_grads();
  issued_[index] = CommSpans::Clock::now();
  if (opt_.bf16_wire) {
    Tensor w = wire();
    ops::cast(w.slice0(b.begin, b.end), g.slice0(b.begin, b.end));
    g = w;
  }
  // Reduce-scatter: the result lands on this rank's share inside the bucket.
  works_[index] = opt_.collective == BucketCollective::AllReduce
                      ? group_->all_reduce(g.slice0(b.begin, b.end), comm::ReduceOp::Avg, label)
                      : group_->reduce_scatter(g.slice0(b.begin, b.end), g.slice0(shard_begin(b), shard_end(b)),
                                               comm::ReduceOp::Avg, shard_counts(b), label);
}

double BucketEngine::finish(int index, StepCommStats& stats) {
  const Bucket& b = buckets_[index];
  comm::WorkPtr w = std::move(works_[index]);
  WEFT_CHECK(w != nullptr, "bucket " + std::to_string(index) + " finished without being launched");
  const auto t0 = std::chrono::steady_clock::now();
  w->wait();
  const double blocked = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (opt_.bf16_wire) {
    const bool whole = opt_.collective == BucketCollective::AllReduce;
    const int64_t lo = whole ? b.begin : shard_begin(b), hi = whole ? b.end : shard_end(b);
    ops::cast(buf_->flat_grads().slice0(lo, hi), wire().slice0(lo, hi));
  }
  if (stats.bucket_seconds.size() < buckets_.size()) stats.bucket_seconds.resize(buckets_.size(), 0);
  stats.bucket_seconds[index] += w->comm_seconds();
  stats.spans.add(issued_[index], *w);
  return blocked;
}

}  // namespace weft
