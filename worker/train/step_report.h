// What the trainer reports after every optimizer step, and the observer
// interface the metrics unit implements. The progress line, summary.json and
// the Prometheus exporter all read these same numbers, so they never disagree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace weft {

struct StepReport {
  int64_t step = 0;            // 1-based: steps completed
  int64_t total_steps = 0;
  double loss = 0;             // mean over all ranks' tokens
  double lr = 0;
  double grad_norm = 0;        // before clipping
  double step_seconds = 0;     // wall time of the step
  double tokens_per_second = 0;  // all ranks
  double mfu = 0;              // model FLOPs utilisation vs the configured peak, 0 if unknown
  int64_t tokens = 0;          // tokens this step, all ranks
  // Phase times of this step (seconds), each measured (train/step_clock.h).
  // exposed_comm is the time compute waited for communication, wherever it
  // waited (ZeRO's gathers in forward and its norm in the optimizer, ISP's
  // gathers and all-to-alls in forward and backward); data, forward,
  // backward and optimizer are compute only; other is the rest of the step
  // (step agreement, prepare_step, zeroing gradients, the loss all-reduce,
  // the device finishing the step), less its waits. They sum to step_seconds
  // within phase_sum_tolerance; a step they miss by more is misaccounted.
  double data_seconds = 0, forward_seconds = 0, backward_seconds = 0, optimizer_seconds = 0,
         exposed_comm_seconds = 0, other_seconds = 0;
  // Gradient sync (empty / zero when training alone).
  std::string sync_group;      // e.g. "dp"
  double comm_seconds = 0;     // collectives' run time this step
  double overlap_ratio = 0;    // 1 - exposed / comm
  std::vector<double> bucket_seconds;  // per bucket reduce time
  int bucket_count = 0;
  int64_t bucket_cap_bytes = 0;
  int64_t bucket_cap_step = 0;       // the step whose start applied the current cap (0: since the start)
  int64_t bucket_cap_rejected = 0;   // cap-file values rejected so far (rank 0 polls the file)
  int64_t memory_param_bytes = 0, memory_grad_bytes = 0, memory_optimizer_bytes = 0,
          memory_activation_bytes = 0;
  int64_t memory_isp_pool_bytes = 0;     // ISP's gathered-weight pool
  // device: cuda: the caching allocator's bytes from the driver and handed out
  int64_t memory_device_held_bytes = 0, memory_device_in_use_bytes = 0;
  double isp_prefetch_wait_seconds = 0;  // ISP: compute waiting for weight gathers this step
};

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void on_step(const StepReport& r) = 0;
  virtual void on_checkpoint(int64_t step) { (void)step; }
  // A held-out evaluation after `step` steps (eval.every).
  virtual void on_eval(int64_t step, double loss) {
    (void)step;
    (void)loss;
  }
};

}  // namespace weft
