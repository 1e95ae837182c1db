#include "parallel/isp.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include "kernels/ops.h"
#include "parallel/host_scalars.h"

namespace weft {

namespace {

Tensor flat(const Tensor& t) { return t.view({t.numel()}); }

}  // namespace

std::vector<ParamInfo> isp_shard_table(const std::vector<ParamInfo>& full, int wp) {
  std::vector<ParamInfo> t;
  int64_t offset = 0;
  for (const ParamInfo& p : full) {
    ParamInfo s = p;
    if (p.kind != ParamKind::Norm && wp > 1) {
      WEFT_CHECK(p.shape.rank == 2 && p.shape[0] % wp == 0, "parallel.wp: " + std::to_string(wp) +
                                                                " does not divide the rows of " +
                                                                p.name + " " + p.shape.str());
      s.shape = Shape{p.shape[0] / wp, p.shape[1]};
    }
    s.numel = s.shape.numel();
    s.offset = offset;
    offset += s.numel;
    t.push_back(std::move(s));
  }
  return t;
}

std::shared_ptr<ParamAndGradBuffer> isp_shard_buffer(const ParamAndGradBuffer& model, int wp) {
  return std::make_shared<ParamAndGradBuffer>(isp_shard_table(model.params(), wp),
                                              model.param_dtype(), model.device());
}

IspGradSync::IspGradSync(const WorkerConfig& cfg, std::shared_ptr<ParamAndGradBuffer> model_buffer,
                         std::shared_ptr<ParamAndGradBuffer> shard_buffer,
                         std::unique_ptr<GradSync> inner, IspGroups groups)
    : GradSync(shard_state_),
      model_(std::move(model_buffer)),
      full_(model_->params()),
      shard_(std::move(shard_buffer)),
      sp_(std::move(groups.sp)),
      wp_(std::move(groups.wp)),
      wdp_(std::move(groups.wdp)),
      inner_(std::move(inner)),
      shard_state_(full_, shard_, model_->device(), wp_, wdp_, cfg.optim, *inner_,
                   [this] { pool_->flush(); }),
      exchange_(sp_, model_->device()) {
  WEFT_CHECK(!model_->owns_storage(),
             "ISP provides the model's weights: its buffer must be Storage::Provided");
  o_.prefetch = cfg.parallel.isp.prefetch;
  o_.wdp_strategy = cfg.parallel.isp.wdp_strategy;
  set_sequence_exchange(exchange_.size() > 1 ? &exchange_ : nullptr);
  // The global norm spans every weight shard; norms are replicated over wp.
  NormScope scope;
  scope.across = wp_;
  scope.device = model_->device();
  for (const ParamInfo& q : full_) scope.replicated.push_back(q.kind == ParamKind::Norm);
  inner_->set_norm_scope(std::move(scope));

  pool_ = std::make_unique<IspWeightPool>(model_, shard_, wp_, o_.prefetch,
                                          [this](int param) { inner_->on_grad_ready(param); });
}

SyncReport IspGradSync::make_report(bool describe) const {
  const SyncReport inner = describe ? inner_->described() : inner_->report();
  SyncReport r;
  r.group = wdp_.get();
  r.last_step = &last_;
  r.bucket_count = inner.bucket_count;
  r.bucket_cap_mb = inner.bucket_cap_mb;
  // The gradient scratch and its staging belong to the gradients; the weight
  // pool is reported on its own (weft_memory_bytes{kind="isp_pool"}).
  r.memory = inner.memory;
  r.memory.grads += pool_->scratch_bytes();
  r.memory.other["isp_pool"] = pool_->pool_bytes();
  if (!describe) return r;
  r.description = fmt::format(
      "ISP: sp {} (group {}), wp {} (group {}), weight shards reduced over wdp {} (group {}) by: "
      "{}; prefetch "
      "{}, weight pool 2 x {:.2f} MiB",
      exchange_.size(), sp_ ? sp_->name() : "-", wp_size(), wp_ ? wp_->name() : "-",
      wdp_ ? wdp_->size() : 1, wdp_ ? wdp_->name() : "-", inner.description,
      o_.prefetch ? "on" : "off", pool_->pool_bytes() / 2 / 1048576.0);
  return r;
}

void IspGradSync::start() {
  inner_->start();
  // Every wp rank starts from the same replicated norm weights; the inner
  // start made the wdp group agree, these make wp agree as well. Like the
  // inner broadcast, this moves working weights only: a master copy came
  // from the same source on every rank (load_weights, load_full_weights).
  if (wp_size() > 1) {
    std::vector<comm::WorkPtr> ws;
    for (size_t i = 0; i < full_.size(); ++i)
      if (full_[i].kind == ParamKind::Norm)
        ws.push_back(wp_->broadcast(flat(shard_->param(int(i))), 0, "norm weights"));
    for (auto& w : ws) w->wait();
  }
}

void IspGradSync::begin_micro_batch(bool last) {
  last_micro_ = last;
  inner_->begin_micro_batch(last);
}

double IspGradSync::finish_micro_batch(double loss) {
  pool_->drain();
  if (last_micro_ && wp_size() > 1) {
    // The inner strategy averages over wdp; wp x wdp is the whole world.
    loss_wire_ = static_cast<float>(loss);
    all_reduce_host(*wp_, model_->device(), &loss_wire_, 1, comm::ReduceOp::Avg, "loss")->wait();
    loss = loss_wire_;
  }
  return inner_->finish_micro_batch(loss);
}

double IspGradSync::clip_and_step(double lr, double max_norm) {
  const double norm = inner_->clip_and_step(lr, max_norm);
  // The shards changed: gathered weights are stale.
  pool_->drop_gathered();
  const PoolStepStats pool = pool_->take_step();
  const double a2a_s = exchange_.take_wait_seconds();
  last_ = *inner_->report().last_step;
  last_.parts["weight_gather"] = {pool.gather_seconds, pool.gather_wait_seconds};
  last_.parts["reduce_scatter"] = {pool.reduce_scatter_seconds, pool.reduce_scatter_wait_seconds};
  last_.parts["all_to_all"] = {a2a_s, a2a_s};
  // Gathers, reduce-scatters and the inner strategy's collectives run side
  // by side on the lanes: their union, not their sum (the all-to-alls hold
  // the compute stream and are counted as it waited).
  CommSpans spans = pool.spans;
  spans.add(last_.spans);
  last_.comm_seconds = spans.busy_seconds() + a2a_s;
  last_.spans = spans;
  last_.exposed_seconds += pool.gather_wait_seconds + pool.reduce_scatter_wait_seconds + a2a_s;
  return norm;
}

}  // namespace weft
