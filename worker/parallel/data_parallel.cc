#include "parallel/data_parallel.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "kernels/stream_timer.h"

namespace weft {

DataParallelOptions data_parallel_options(const ParallelConfig& p) {
  DataParallelOptions o;
  o.buckets = bucket_options(p);
  o.overlap = p.overlap;
  return o;
}

DataParallel::DataParallel(std::shared_ptr<ParamAndGradBuffer> buffer, comm::CommunicatorPtr dp,
                           DataParallelOptions opt, const OptimConfig& optim)
    : GradSync(optimizer_),
      opt_dp_(opt),
      reducer_(buffer, dp, BucketCollective::AllReduceAvg, opt.buckets),
      optimizer_(std::move(buffer), optim, /*writer=*/dp->rank() == 0) {
  if (opt.buckets.unsynced_for_tests)
    spdlog::warn(
        "WEFT_TEST_UNSYNCED_GRADS=1: gradients are NOT averaged across ranks (a test's negative "
        "control)");
}

SyncReport DataParallel::make_report(bool describe) const {
  SyncReport r = reducer_.report();
  r.memory = optimizer_.state_bytes();
  if (!describe) return r;
  const comm::Communicator& dp = reducer_.group();
  r.description =
      fmt::format("data parallel over {} ranks (group {}), bucket {}, {}, overlap {}, wire {}",
                  dp.size(), dp.name(), reducer_.engine().sizing().describe(),
                  describe_buckets(reducer_.engine().buckets()), opt_dp_.overlap ? "on" : "off",
                  opt_dp_.buckets.bf16_wire ? "bf16" : "fp32");
  return r;
}

void DataParallel::rebucket(double cap_mb, int64_t step) {
  reducer_.engine().plan(cap_mb);
  spdlog::info("step {}: bucket cap now {:.3g} MiB, {}", step + 1, cap_mb,
               describe_buckets(reducer_.engine().buckets()));
}

void DataParallel::begin_micro_batch(bool last) {
  sync_ = last;
  reducer_.engine().begin();
  if (last) reducer_.stats() = StepCommStats{};
}

void DataParallel::on_grad_ready(int param) {
  if (!sync_) return;  // no_sync: keep accumulating locally
  reducer_.engine().mark_ready(param);
  if (opt_dp_.overlap) reducer_.engine().launch_ready_in_order();
}

double DataParallel::finish_micro_batch(double loss) {
  if (!sync_) return loss;
  // Queued behind the gradient buckets, so on the CPU it costs no round trip
  // of its own: it completes while wait_buckets waits anyway. On a GPU
  // all_reduce_host returns completed: the host waits here for the buckets
  // launched so far (the loss reaches the host every step anyway; this moves
  // that wait before the optimizer's launches).
  comm::WorkPtr loss_work = reducer_.average_loss(loss);
  wait_buckets();
  loss_work->wait();
  return reducer_.averaged_loss();
}

void DataParallel::wait_buckets() {
  BucketEngine& engine = reducer_.engine();
  StepCommStats& stats = reducer_.stats();
  engine.check_all_ready();
  // Exposed time: from the end of backward compute until every bucket is
  // reduced (the launches below are part of it when overlap is off), as the
  // compute stream sees it (on a GPU the waits below only order the stream).
  ops::StreamTimer exposed(reducer_.buffer().device());
  engine.launch_ready_in_order();
  stats.bucket_seconds.assign(engine.size(), 0);
  for (int b = 0; b < engine.size(); ++b) engine.wait(b);
  stats.exposed_seconds = exposed.stop();  // on a GPU: every bucket's events have completed now
  for (int b = 0; b < engine.size(); ++b) engine.account(b, stats);
  stats.comm_seconds = stats.spans.busy_seconds();
}

}  // namespace weft
