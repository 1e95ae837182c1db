#include "parallel/isp_weight_pool.h"

#include <algorithm>
#include <utility>

#include "kernels/ops.h"

namespace weft {

namespace {

Tensor flat(const Tensor& t) { return t.view({t.numel()}); }

}  // namespace

IspWeightPool::IspWeightPool(std::shared_ptr<ParamAndGradBuffer> model, std::shared_ptr<ParamAndGradBuffer> shard,
                             comm::CommunicatorPtr wp, bool prefetch, std::function<void(int)> report)
    : model_(std::move(model)),
      shard_(std::move(shard)),
      full_(model_->params()),
      wp_(std::move(wp)),
      prefetch_(prefetch),
      report_(std::move(report)),
      gather_waits_(model_->device()),
      rs_waits_(model_->device()) {
  for (const ParamInfo& p : full_) n_layers_ = std::max(n_layers_, p.layer + 1);
  // Units and the pool: a slot holds the largest unit's full weights.
  unit_params_.assign(n_layers_ + 2, {});
  pool_offset_.assign(full_.size(), -1);
  for (int i = static_cast<int>(full_.size()) - 1; i >= 0; --i)  // forward order within a unit
    if (sharded(i)) unit_params_[unit_of_layer(full_[i].layer)].push_back(i);
  for (auto& params : unit_params_) {
    int64_t off = 0;
    for (int i : params) {
      pool_offset_[i] = off;
      off += full_[i].numel;
    }
    slot_numel_ = std::max(slot_numel_, off);
  }
  if (wp_size() > 1) {
    for (int s = 0; s < 2; ++s) {
      pool_[s] = Buffer(static_cast<size_t>(slot_numel_) * dtype_size(model_->param_dtype()), model_->device());
      gpool_[s] = Buffer(static_cast<size_t>(slot_numel_) * sizeof(float), model_->device());
      gstage_[s] = Buffer(static_cast<size_t>(slot_numel_ / wp_size()) * sizeof(float), model_->device());
    }
  }
  model_->set_weight_provider(this);
  model_->set_weight_hook(this);
}

IspWeightPool::~IspWeightPool() {
  // Nothing may still write into the pool or the shards once we are gone.
  try {
    for (auto& g : gathers_)
      for (auto& w : g)
        if (w) w->wait();
    for (auto& p : pending_) p.work->wait();
  } catch (const std::exception&) {
    // The group failed; the error was reported where it happened.
  }
  model_->set_weight_hook(nullptr);
  model_->set_weight_provider(nullptr);
}

int64_t IspWeightPool::pool_bytes() const { return static_cast<int64_t>(pool_[0].bytes() + pool_[1].bytes()); }

int64_t IspWeightPool::scratch_bytes() const {
  int64_t n = 0;
  for (int s = 0; s < 2; ++s) n += static_cast<int64_t>(gpool_[s].bytes() + gstage_[s].bytes());
  return n;
}

int IspWeightPool::unit_of_layer(int layer) const {
  if (layer == kEmbeddingLayer) return 0;
  if (layer == kHeadLayer) return n_layers_ + 1;
  return layer + 1;
}

int IspWeightPool::layer_of_unit(int unit) const {
  if (unit == 0) return kEmbeddingLayer;
  if (unit == n_layers_ + 1) return kHeadLayer;
  return unit - 1;
}

void IspWeightPool::launch_gather(int unit) {
  const int s = unit % 2;
  WEFT_CHECK(gathers_[s].empty(), "ISP: pool slot reused before its gather was consumed");
  slot_unit_[s] = unit;
  Tensor pool = pool_[s].as(model_->param_dtype(), {slot_numel_});
  for (int i : unit_params_[unit]) {
    gathers_issued_[s].push_back(CommSpans::Clock::now());
    gathers_[s].push_back(wp_->all_gather(flat(shard_->param(i)),
                                          pool.slice0(pool_offset_[i], pool_offset_[i] + full_[i].numel), {},
                                          "gather " + full_[i].name));
  }
}

void IspWeightPool::wait_gather(int unit) {
  const int s = unit % 2;
  WEFT_CHECK(slot_unit_[s] == unit, "ISP: unit's weights are not in their pool slot");
  for (size_t i = 0; i < gathers_[s].size(); ++i) {
    const comm::WorkPtr& w = gathers_[s][i];
    gather_waits_.time([&] { w->wait(); });
    spans_.add(gathers_issued_[s][i], *w);
    gather_spans_.add(gathers_issued_[s][i], *w);
  }
  gathers_[s].clear();
  gathers_issued_[s].clear();
}

void IspWeightPool::before_use(int layer, WeightUse use) {
  shard_->before_use(layer, use);  // ZeRO's overlapped shard gathers land first
  if (wp_size() == 1) return;
  const int u = unit_of_layer(layer);
  const int s = u % 2;
  if (use == WeightUse::Backward) {
    // The slot's scratch was unit u+2's: its reduce-scatters must finish.
    free_grad_slot(s);
    gslot_unit_[s] = u;
    int64_t numel = 0;
    for (int i : unit_params_[u]) numel += full_[i].numel;
    ops::fill(gpool_[s].as(DType::F32, {slot_numel_}).slice0(0, numel), 0.0f);
  }
  if (slot_unit_[s] != u) {
    if (!gathers_[s].empty()) wait_gather(slot_unit_[s]);  // never consumed: drain before reuse
    launch_gather(u);
  }
  wait_gather(u);
  if (!prefetch_) return;
  const int next = use == WeightUse::Forward ? u + 1 : u - 1;
  if (next < 0 || next > n_layers_ + 1) return;
  if (slot_unit_[next % 2] == next) return;  // still there
  if (use == WeightUse::Forward) shard_->before_use(layer_of_unit(next), use);
  launch_gather(next);
}

Tensor IspWeightPool::weight(int i) {
  if (!sharded(i)) return shard_->param(i);
  const int u = unit_of_layer(full_[i].layer), s = u % 2;
  WEFT_CHECK(slot_unit_[s] == u && gathers_[s].empty(),
             "ISP: " + full_[i].name + " used outside its layer's before_use");
  return Tensor(static_cast<char*>(pool_[s].data()) + pool_offset_[i] * int64_t(dtype_size(model_->param_dtype())),
                model_->param_dtype(), full_[i].shape, model_->device());
}

Tensor IspWeightPool::weight_grad(int i) {
  if (!sharded(i)) return shard_->grad(i);
  const int u = unit_of_layer(full_[i].layer), s = u % 2;
  WEFT_CHECK(gslot_unit_[s] == u, "ISP: gradient of " + full_[i].name + " written outside its layer's backward");
  return Tensor(static_cast<float*>(gpool_[s].data()) + pool_offset_[i], DType::F32, full_[i].shape,
                model_->device());
}

void IspWeightPool::zero_grads() { shard_->zero_grads(); }

void IspWeightPool::grad_ready(int param) {
  if (wp_size() == 1) return report_(param);
  if (!sharded(param)) {
    // Replicated: average over wp in place (identical earlier micro-batches'
    // sums stay what they are), then the inner strategy averages over wdp.
    pending_.push_back({param, -1, CommSpans::Clock::now(),
                        wp_->all_reduce(flat(shard_->grad(param)), comm::ReduceOp::Avg, "norm grad " + full_[param].name)});
  } else {
    const int s = unit_of_layer(full_[param].layer) % 2;
    const int64_t off = pool_offset_[param], n = full_[param].numel, wp = wp_size();
    Tensor stage = gstage_[s].as(DType::F32, {slot_numel_ / wp}).slice0(off / wp, (off + n) / wp);
    pending_.push_back({param, s, CommSpans::Clock::now(),
                        wp_->reduce_scatter(flat(weight_grad(param)), stage, comm::ReduceOp::Avg, {},
                                            "grad " + full_[param].name)});
  }
  while (!pending_.empty() && pending_.front().work->completed()) complete_front();
}

void IspWeightPool::complete_front() {
  Pending p = pending_.front();
  pending_.pop_front();
  rs_waits_.time([&] { p.work->wait(); });
  spans_.add(p.issued, *p.work);
  rs_spans_.add(p.issued, *p.work);
  if (p.slot >= 0) {
    const int64_t off = pool_offset_[p.param], n = full_[p.param].numel, wp = wp_size();
    ops::add_acc(flat(shard_->grad(p.param)),
                 gstage_[p.slot].as(DType::F32, {slot_numel_ / wp}).slice0(off / wp, (off + n) / wp));
  }
  report_(p.param);
}

void IspWeightPool::free_grad_slot(int slot) {
  // Pending entries are in the model's order: complete up to the slot's last.
  while (std::any_of(pending_.begin(), pending_.end(), [slot](const Pending& p) { return p.slot == slot; }))
    complete_front();
  gslot_unit_[slot] = -1;
}

void IspWeightPool::drain() {
  while (!pending_.empty()) complete_front();
}

void IspWeightPool::drop_gathered() {
  for (int s = 0; s < 2; ++s) {
    if (!gathers_[s].empty()) wait_gather(slot_unit_[s]);
    slot_unit_[s] = -1;
  }
}

void IspWeightPool::flush() {
  for (int s = 0; s < 2; ++s)
    if (!gathers_[s].empty()) wait_gather(slot_unit_[s]);
}

PoolStepStats IspWeightPool::take_step() {
  PoolStepStats st;
  st.gather_seconds = gather_spans_.busy_seconds();
  // Every wait of this step is behind us: on a GPU, one sync reads them all.
  st.gather_wait_seconds = gather_waits_.take_seconds();
  st.reduce_scatter_wait_seconds = rs_waits_.take_seconds();
  st.reduce_scatter_seconds = rs_spans_.busy_seconds();
  st.spans = spans_;
  spans_.clear();
  gather_spans_.clear();
  rs_spans_.clear();
  return st;
}

}  // namespace weft
