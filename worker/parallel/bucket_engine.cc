#include "parallel/bucket_engine.h"

#include <chrono>
#include <cstdlib>
#include <string>

namespace weft {

BucketEngineOptions bucket_options(const ParallelConfig& p) {
  BucketEngineOptions o;
  o.bucket_cap_mb = p.bucket_cap_mb;
  o.first_bucket_mb = p.first_bucket_mb;
  o.bf16_wire = p.bf16_wire;
  const char* unsynced =
      std::getenv("WEFT_TEST_UNSYNCED_GRADS");  // tests only: gradients never averaged
  o.unsynced_for_tests = unsynced && std::string(unsynced) == "1";
  return o;
}

BucketEngine::BucketEngine(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr group,
                           BucketCollective collective, BucketEngineOptions opt)
    : buf_(std::move(buffer)), group_(std::move(group)), collective_(collective), opt_(opt) {
  if (opt_.bf16_wire)
    wire_ = Buffer(static_cast<size_t>(buf_->numel()) * dtype_size(DType::BF16), buf_->device());
  sizing_ = resolve_bucket_sizing(buf_->params(), opt_.bucket_cap_mb, opt_.first_bucket_mb,
                                  group_->size());
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

int64_t BucketEngine::result_begin(int b) const {
  const Bucket& k = buckets_[b];
  return collective_ == BucketCollective::AllReduceAvg
             ? k.begin
             : k.shard_begin(group_->rank(), group_->size());
}

int64_t BucketEngine::result_end(int b) const {
  const Bucket& k = buckets_[b];
  return collective_ == BucketCollective::AllReduceAvg
             ? k.end
             : k.shard_end(group_->rank(), group_->size());
}

std::vector<int64_t> BucketEngine::shard_counts(int b) const {
  const Bucket& k = buckets_[b];
  const int n = group_->size();
  std::vector<int64_t> counts(n);
  for (int r = 0; r < n; ++r) counts[r] = k.shard_end(r, n) - k.shard_begin(r, n);
  return counts;
}

void BucketEngine::begin() {
  next_launch_ = 0;
  for (const Bucket& b : buckets_) {
    pending_[b.index] = b.num_params();
    works_[b.index] = nullptr;
  }
}

void BucketEngine::mark_ready(int param) {
  const int b = bucket_of_param_.at(param);
  WEFT_CHECK(pending_[b] > 0, "parameter " + buf_->params()[param].name + " reported ready twice");
  --pending_[b];
}

void BucketEngine::launch_ready_in_order() {
  while (next_launch_ < static_cast<int>(buckets_.size()) && pending_[next_launch_] == 0)
    launch(next_launch_++);
}

void BucketEngine::check_all_ready() const {
  for (int p : pending_)
    WEFT_CHECK(p == 0, "backward finished with parameters whose gradients were never reported");
}

void BucketEngine::launch(int index) {
  const Bucket& b = buckets_[index];
  const std::string label = "bucket " + std::to_string(index);
  Tensor in = buf_->flat_grads().slice0(b.begin, b.end);
  Tensor whole = buf_->flat_grads();
  if (opt_.bf16_wire) {
    whole = wire_.as(DType::BF16, {buf_->numel()});
    ops::cast(whole.slice0(b.begin, b.end), in);
    in = whole.slice0(b.begin, b.end);
  }
  issued_[index] = CommSpans::Clock::now();
  if (opt_.unsynced_for_tests) {
    works_[index] = group_->barrier(label);
    return;
  }
  if (collective_ == BucketCollective::AllReduceAvg) {
    works_[index] = group_->all_reduce(in, comm::ReduceOp::Avg, label);
    return;
  }
  // The result lands on this rank's share inside the bucket itself.
  works_[index] = group_->reduce_scatter(in, whole.slice0(result_begin(index), result_end(index)),
                                         comm::ReduceOp::Avg, shard_counts(index), label);
}

void BucketEngine::wait(int index) {
  works_[index]->wait();
  if (opt_.bf16_wire) {
    const int64_t a = result_begin(index), e = result_end(index);
    ops::cast(buf_->flat_grads().slice0(a, e), wire_.as(DType::BF16, {buf_->numel()}).slice0(a, e));
  }
}

void BucketEngine::account(int index, StepCommStats& stats) {
  stats.bucket_seconds[index] += works_[index]->comm_seconds();
  stats.spans.add(issued_[index], *works_[index]);
  works_[index] = nullptr;
}

}  // namespace weft
