#include "parallel/data_parallel.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

#include "kernels/stream_timer.h"

namespace weft {

DataParallelOptions data_parallel_options(const ParallelConfig& p) {
  DataParallelOptions o;
  o.bucket_cap_mb = p.bucket_cap_mb;
  o.first_bucket_mb = p.first_bucket_mb;
  o.overlap = p.overlap;
  o.bf16_wire = p.bf16_wire;
  const char* unsynced = std::getenv("WEFT_TEST_UNSYNCED_GRADS");  // tests only: gradients never averaged
  o.unsynced_for_tests = unsynced && std::string(unsynced) == "1";
  return o;
}

DataParallel::DataParallel(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr dp,
                           DataParallelOptions opt, const OptimConfig& optim)
    : BucketedSync(buffer, dp, BucketCollective::AllReduceAvg,
                   {opt.bucket_cap_mb, opt.first_bucket_mb, opt.bf16_wire, opt.unsynced_for_tests}),
      opt_dp_(opt),
      optimizer_(std::move(buffer), optim, /*writer=*/dp->rank() == 0) {
  if (opt.unsynced_for_tests)
    spdlog::warn("WEFT_TEST_UNSYNCED_GRADS=1: gradients are NOT averaged across ranks (a test's negative control)");
}

std::string DataParallel::describe() const {
  return fmt::format("data parallel over {} ranks (group {}), bucket {}, {}, overlap {}, wire {}", dp_->size(),
                     dp_->name(), engine_.sizing().describe(), describe_buckets(engine_.buckets()),
                     opt_dp_.overlap ? "on" : "off", opt_dp_.bf16_wire ? "bf16" : "fp32");
}

void DataParallel::rebucket(double cap_mb, int64_t step) {
  engine_.plan(cap_mb);
  spdlog::info("step {}: bucket cap now {:.3g} MiB, {}", step + 1, cap_mb, describe_buckets(engine_.buckets()));
}

void DataParallel::begin_micro_batch(bool last) {
  sync_ = last;
  engine_.begin();
  if (last) stats_ = StepCommStats{};
}

void DataParallel::on_grad_ready(int param) {
  if (!sync_) return;  // no_sync: keep accumulating locally
  engine_.mark_ready(param);
  if (opt_dp_.overlap) engine_.launch_ready_in_order();
}

double DataParallel::finish_micro_batch(double loss) {
  if (!sync_) return loss;
  // Queued behind the gradient buckets, so it costs no round trip of its own:
  // it completes while wait_buckets waits anyway.
  comm::WorkPtr loss_work = average_loss(loss);
  wait_buckets();
  loss_work->wait();
  return averaged_loss();
}

void DataParallel::wait_buckets() {
  engine_.check_all_ready();
  // Exposed time: from the end of backward compute until every bucket is
  // reduced (the launches below are part of it when overlap is off), as the
  // compute stream sees it (on a GPU the waits below only order the stream).
  ops::StreamTimer exposed(buf_->device());
  engine_.launch_ready_in_order();
  stats_.bucket_seconds.assign(engine_.size(), 0);
  for (int b = 0; b < engine_.size(); ++b) {
    engine_.wait(b);
    on_bucket_reduced(b);
  }
  stats_.exposed_seconds = exposed.stop();  // on a GPU: every bucket's events have completed now
  for (int b = 0; b < engine_.size(); ++b) engine_.account(b, stats_);
  stats_.comm_seconds = stats_.spans.busy_seconds();
}

}  // namespace weft
