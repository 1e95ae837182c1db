// Communication overlapped with compute, per strategy, asserted on the step's
// structure rather than its speed, so the checks hold on a loaded machine.
//
// The ranks are threads of this process on real Gloo groups whose link is
// emulated (comm.simulate), so every collective takes a known, long time. A
// paced model stands in for Llama: the same hooks in the same order
// (before_use per layer, on_grad_ready per parameter in backward order) with a
// sleep where the model would compute, each parameter's share of the pass
// being its share of the weights. Backward lasts 1.5 times what the emulated
// link needs to all-reduce the whole gradient, so the sync is of the order of
// backward and only overlap can hide it; forward lasts half as long.
//
// Assertions read the step's own accounting (StepCommStats: comm is the union
// of the collectives' spans, exposed the time compute waited; CommSpans for
// where each collective ran) and, for ZeRO's early step, the weights. Each
// runs against its negative control, the user's switch that turns the
// overlap off, where the same measurement must come out the other way.
//
// Why not flaky: a sleep is a lower bound, so load only lengthens compute;
// what load does stretch is the collectives (their real run and their
// threads' wake-ups), which the 1.5x margin absorbs. Structure (where spans
// start, whether weights changed) is checked on every step. Exposed shares
// are checked on the steady steps (after the first, whose forward has no
// gathers to wait for): the overlapped run on its best one, since a burst of
// load can stretch one step's collectives but lost overlap exposes every
// step; the control on every one, since without overlap compute waits for
// all of the communication however long it takes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/process_groups.h"
#include "config/config.h"
#include "kernels/ops.h"
#include "model/llama.h"
#include "model/param_and_grad_buffer.h"
#include "parallel/grad_sync.h"
#include "parallel/strategy_factory.h"
#include "support/fake_communicator.h"
#include "support/net.h"
#include "train/comm_options.h"

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

// 8 blocks of 1.5 MiB of fp32 gradients, 12.8 MiB in all: the auto bucket
// rule (the default) cuts 12 buckets on 2 ranks; ISP has 10 weight units.
const char* kModel =
    "model: {vocab_size: 256, d_model: 192, n_layers: 8, n_heads: 4, n_kv_heads: 2, max_seq_len: 64}\n";
// About 0.3 s to all-reduce the whole gradient over 2 ranks.
const char* kLink = "comm: {simulate: {latency_us: 100, bandwidth_gbps: 0.36}}\n";

WorkerConfig config(const std::string& parallel, double grad_clip = 0) {
  return parse_config(std::string(kModel) + kLink + "optim: {grad_clip: " + std::to_string(grad_clip) +
                          "}\nparallel: " + parallel + "\n",
                      "overlap test");
}

// Seconds the emulated link needs to all-reduce the whole gradient.
double link_seconds(const WorkerConfig& cfg, int ranks) {
  int64_t numel = 0;
  for (const ParamInfo& p : llama_param_table(cfg.model)) numel += p.numel;
  const auto d = group_options(cfg).network.delay(comm::OpKind::AllReduce, uint64_t(numel) * 4, ranks);
  return std::chrono::duration<double>(d).count();
}

void pace(double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }

// Stands in for Llama (model/llama.h): before_use(layer, use) before each
// layer, gradients written and reported in the table's (backward) order.
class PacedModel {
 public:
  PacedModel(std::shared_ptr<ParamAndGradBuffer> buf, double forward_s, double backward_s)
      : buf_(std::move(buf)), forward_s_(forward_s), backward_s_(backward_s) {
    for (const ParamInfo& p : buf_->params()) {
      total_ += p.numel;
      if (layers_.empty() || layers_.back().first != p.layer) layers_.push_back({p.layer, 0});
      layers_.back().second += p.numel;
    }
  }

  void forward() const {
    for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {  // embedding, blocks 0.., head
      buf_->before_use(it->first, WeightUse::Forward);
      pace(forward_s_ * double(it->second) / double(total_));
    }
  }

  // `before_last` runs just before the last gradient is reported.
  void backward(const std::function<void(int)>& ready, const std::function<void()>& before_last) const {
    const auto& params = buf_->params();
    const int n = static_cast<int>(params.size());
    int layer = INT_MIN;
    for (int i = 0; i < n; ++i) {
      if (params[i].layer != layer) {
        layer = params[i].layer;
        buf_->before_use(layer, WeightUse::Backward);
      }
      pace(backward_s_ * double(params[i].numel) / double(total_));
      ops::fill(buf_->grad(i), 0.01f);
      if (i == n - 1) before_last();
      ready(i);
    }
  }

 private:
  std::shared_ptr<ParamAndGradBuffer> buf_;
  double forward_s_, backward_s_;
  int64_t total_ = 0;
  std::vector<std::pair<int, int64_t>> layers_;  // forward units in backward order: layer, elements
};

struct StepRecord {
  StepCommStats stats;  // after clip_and_step, as the metrics read it
  Clock::time_point backward_begin, last_ready, backward_end;
  bool weights_changed_in_backward = false;  // a shard was stepped before backward's last gradient
  int buckets = 0;

  double exposed_share() const { return stats.exposed_seconds / stats.comm_seconds; }
  double gather_wait_share() const {
    const StepCommStats::Part g = stats.part("weight_gather");
    return g.seconds > 0 ? g.wait_seconds / g.seconds : 0;
  }
  // Collectives that started during backward, before its last gradient was
  // reported (ZeRO's gathers waited in forward started before it).
  int started_in_backward() const {
    int n = 0;
    for (const auto& [start, end] : stats.spans.intervals()) n += start >= backward_begin && start < last_ready;
    return n;
  }
  Clock::time_point first_start() const {
    Clock::time_point t = Clock::time_point::max();
    for (const auto& [start, end] : stats.spans.intervals()) t = std::min(t, start);
    return t;
  }
};

// `steps` optimizer steps of `cfg`'s strategy on `ranks` Gloo ranks (threads),
// the trainer's protocol around the paced model; records[rank][step].
std::vector<std::vector<StepRecord>> train(const WorkerConfig& cfg, int steps, int ranks = 2) {
  const double backward_s = 1.5 * link_seconds(cfg, ranks), lr = 1e-3;
  const int port = testing::free_port();
  std::vector<std::vector<StepRecord>> records(ranks);
  testing::run_ranks(ranks, [&](int rank) {
    comm::ProcessEnv env;
    env.rank = rank;
    env.world = ranks;
    env.master_addr = "127.0.0.1";
    env.master_port = static_cast<uint16_t>(port);
    comm::GroupOptions opt = group_options(resolved(cfg));
    opt.policy = comm::FailurePolicy::Throw;
    opt.timeout = opt.rendezvous_timeout = std::chrono::seconds(60);
    auto pg = comm::init_process_groups(env, opt);
    const auto table = llama_param_table(cfg.model);
    auto buf = std::make_shared<ParamAndGradBuffer>(table, DType::F32, Device::CPU, model_storage(cfg.parallel));
    auto sync = make_grad_sync(cfg, buf, SyncGroups{pg->dp, pg->sp, pg->wp, pg->wdp});
    {
      ParamAndGradBuffer full(table);
      ops::fill(full.flat_params(), 0.5f);
      sync->state().load_full_weights(full);
    }
    sync->start();
    const bool owned = buf->owns_storage();
    PacedModel model(buf, backward_s / 2, backward_s);
    std::vector<char> before(owned ? buf->param_bytes() : 0);
    for (int step = 0; step < steps; ++step) {
      StepRecord rec;
      sync->prepare_step(lr, cfg.optim.grad_clip);
      buf->zero_grads();
      sync->begin_micro_batch(true);
      model.forward();
      rec.backward_begin = Clock::now();
      if (owned) std::memcpy(before.data(), buf->flat_params().data, before.size());
      model.backward([&](int i) { sync->on_grad_ready(i); },
                     [&] {
                       rec.last_ready = Clock::now();
                       if (owned)
                         rec.weights_changed_in_backward =
                             std::memcmp(before.data(), buf->flat_params().data, before.size()) != 0;
                     });
      rec.backward_end = Clock::now();
      sync->finish_micro_batch(1.0);
      sync->clip_and_step(lr, cfg.optim.grad_clip);
      rec.stats = (*sync->report().last_step);
      rec.buckets = sync->report().bucket_count;
      records[rank].push_back(std::move(rec));
    }
    sync->state().flush();
    pg->world->barrier("done")->wait();
  });
  return records;
}

void print(const std::string& what, const StepRecord& r) {
  std::printf("%-44s comm %6.1f ms, exposed %6.1f ms (%.2f of comm), %2d of %2zu collectives began in backward",
              what.c_str(), r.stats.comm_seconds * 1e3, r.stats.exposed_seconds * 1e3, r.exposed_share(),
              r.started_in_backward(), r.stats.spans.intervals().size());
  if (r.stats.part("weight_gather").seconds > 0)
    std::printf("; gathers %.1f ms, waited %.1f ms (%.2f)", r.stats.part("weight_gather").seconds * 1e3,
                r.stats.part("weight_gather").wait_seconds * 1e3, r.gather_wait_share());
  std::printf("\n");
}

// One rank's run: every step printed; the exposed share of the steady steps
// (all but the first), their least and their most.
struct RankRun {
  std::vector<StepRecord> steps;
  double least = 1e9, most = 0, least_gather_wait = 1e9, most_gather_wait = 0;

  RankRun(const std::string& what, std::vector<StepRecord> s) : steps(std::move(s)) {
    for (size_t i = 0; i < steps.size(); ++i) {
      print(what + ", step " + std::to_string(i + 1), steps[i]);
      if (i == 0) continue;
      least = std::min(least, steps[i].exposed_share());
      most = std::max(most, steps[i].exposed_share());
      least_gather_wait = std::min(least_gather_wait, steps[i].gather_wait_share());
      most_gather_wait = std::max(most_gather_wait, steps[i].gather_wait_share());
    }
  }
};

// Buckets were reduced while backward went on: the first bucket's reduction
// started before backward's last gradient was ready, and so did half of them.
void expect_reduced_during_backward(const RankRun& run) {
  for (const StepRecord& s : run.steps) {
    ASSERT_GE(s.buckets, 10);
    EXPECT_GE(s.started_in_backward(), s.buckets / 2);
  }
}

// Nothing was: every collective started after backward ended.
void expect_reduced_after_backward(const RankRun& run) {
  for (const StepRecord& s : run.steps) {
    EXPECT_GT(s.first_start(), s.backward_end);
    EXPECT_EQ(s.started_in_backward(), 0);
  }
}

// DP: buckets are all-reduced while backward goes on; at the default buckets
// only the tail is exposed. parallel.overlap: false launches every bucket
// after backward, which exposes the whole sync.
TEST(Overlap, DataParallelReducesBucketsDuringBackward) {
  const auto on = train(config("{strategy: dp}"), 3);
  const auto off = train(config("{strategy: dp, overlap: false}"), 2);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const RankRun a("dp, overlap on, rank " + std::to_string(rank), on[rank]);
    const RankRun b("dp, overlap off, rank " + std::to_string(rank), off[rank]);
    expect_reduced_during_backward(a);
    EXPECT_LT(a.least, 0.25);
    // The same measurements, overlap off.
    expect_reduced_after_backward(b);
    EXPECT_GT(b.least, 0.8);
  }
}

// ZeRO-1/2 with every overlap on (interleaved, parameter gathers behind the
// next forward, no clipping): reduce-scatters run during backward, each shard
// is stepped as its reduction completes while backward goes on, and what is
// left exposed is the tail. All of it off (parallel.overlap: false,
// zero.overlap: none, gathers waited in the step) exposes the whole sync.
void expect_zero_hides_its_sync(int stage) {
  const std::string z = "stage: " + std::to_string(stage);
  const auto on = train(config("{strategy: zero, zero: {" + z + ", overlap: interleaved, overlap_param_gather: true}}"), 3);
  const auto off = train(config("{strategy: zero, overlap: false, zero: {" + z + ", overlap: none}}"), 2);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::string name = "zero-" + std::to_string(stage) + ", every overlap ";
    const RankRun a(name + "on, rank " + std::to_string(rank), on[rank]);
    const RankRun b(name + "off, rank " + std::to_string(rank), off[rank]);
    expect_reduced_during_backward(a);
    for (const StepRecord& s : a.steps)
      EXPECT_TRUE(s.weights_changed_in_backward) << "no shard was stepped before backward's last gradient";
    EXPECT_LT(a.least, 0.25);
    // The same measurements, overlap off.
    expect_reduced_after_backward(b);
    for (const StepRecord& s : b.steps) EXPECT_FALSE(s.weights_changed_in_backward);
    EXPECT_GT(b.least, 0.8);
  }
}

TEST(Overlap, Zero1HidesItsSyncBehindCompute) { expect_zero_hides_its_sync(1); }
TEST(Overlap, Zero2HidesItsSyncBehindCompute) { expect_zero_hides_its_sync(2); }

// The parameter all-gathers are issued only after the last reduce-scatter
// (every rank must issue collectives in the same order, and ranks see
// completions at different moments), so whatever the overlap mode they run
// behind compute only with overlap_param_gather, behind the next forward;
// without it the step waits for them: about half of ZeRO's traffic exposed.
TEST(Overlap, ZeroParameterGathersHideOnlyBehindTheNextForward) {
  const std::string zero = "{strategy: zero, zero: {stage: 1, overlap: interleaved";
  const auto behind_forward = train(config(zero + ", overlap_param_gather: true}}"), 3);
  const auto in_step = train(config(zero + "}}"), 3);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const RankRun a("zero-1 gathers behind forward, rank " + std::to_string(rank), behind_forward[rank]);
    const RankRun b("zero-1 gathers in the step, rank " + std::to_string(rank), in_step[rank]);
    // Both reduce during backward: the difference is the gathers.
    expect_reduced_during_backward(a);
    expect_reduced_during_backward(b);
    EXPECT_LT(a.least, 0.25);
    EXPECT_GT(b.least, 0.3);
  }
}

// Interleaved ZeRO steps a shard as soon as its reduce-scatter completes,
// before the last bucket is even launched, when nothing needs the global
// norm first. Clipping (optim.grad_clip > 0, default 1.0) scales every
// gradient by a factor known only once every bucket is reduced: no shard is
// stepped before the last reduction, though the reductions still overlap.
TEST(Overlap, ZeroStepsAShardBeforeTheLastReductionUnlessClipping) {
  const std::string zero = "{strategy: zero, zero: {stage: 2, overlap: interleaved}}";
  const auto unclipped = train(config(zero, 0), 2);
  const auto clipped = train(config(zero, 1.0), 2);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const RankRun a("zero-2 interleaved, no clipping, rank " + std::to_string(rank), unclipped[rank]);
    const RankRun b("zero-2 interleaved, grad_clip 1.0, rank " + std::to_string(rank), clipped[rank]);
    for (const StepRecord& s : a.steps)
      EXPECT_TRUE(s.weights_changed_in_backward) << "no shard was stepped before backward's last gradient";
    for (const StepRecord& s : b.steps)
      EXPECT_FALSE(s.weights_changed_in_backward) << "a shard was stepped before the global norm was known";
    expect_reduced_during_backward(b);
  }
}

// ISP (wp 2): with prefetch, unit u+1's weights (backward: u-1) are gathered
// while u computes and the gradient reduce-scatters run behind backward, so
// compute waits for little of either; isp.prefetch: false gathers each
// unit's weights when it needs them and waits for all of it.
TEST(Overlap, IspPrefetchesWeightsBehindCompute) {
  const auto on = train(config("{strategy: isp, wp: 2}"), 3);
  const auto off = train(config("{strategy: isp, wp: 2, isp: {prefetch: false}}"), 2);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const RankRun a("isp wp 2, prefetch on, rank " + std::to_string(rank), on[rank]);
    const RankRun b("isp wp 2, prefetch off, rank " + std::to_string(rank), off[rank]);
    EXPECT_LT(a.least_gather_wait, 0.25);
    EXPECT_LT(a.least, 0.25);
    // The same measurements, prefetch off.
    EXPECT_GT(b.least_gather_wait, 0.8);
    EXPECT_GT(b.least, 0.4);
  }
}

}  // namespace
}  // namespace weft
