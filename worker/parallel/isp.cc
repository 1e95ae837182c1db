#include "parallel/isp.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include "kernels/ops.h"
#include "parallel/host_scalars.h"
#include "parallel/strategy_factory.h"

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
      WEFT_CHECK(p.shape.rank == 2 && p.shape[0] % wp == 0,
                 "parallel.wp: " + std::to_string(wp) + " does not divide the rows of " + p.name + " " +
                     p.shape.str());
      s.shape = Shape{p.shape[0] / wp, p.shape[1]};
    }
    s.numel = s.shape.numel();
    s.offset = offset;
    offset += s.numel;
    t.push_back(std::move(s));
  }
  return t;
}

IspGradSync::IspGradSync(const WorkerConfig& cfg, std::shared_ptr<ParamAndGradBuffer> model_buffer,
                         IspGroups groups)
    : model_(std::move(model_buffer)),
      full_(model_->params()),
      sp_(std::move(groups.sp)),
      wp_(std::move(groups.wp)),
      wdp_(std::move(groups.wdp)),
      gather_waits_(model_->device()),
      rs_waits_(model_->device()),
      a2a_waits_(model_->device()) {
  WEFT_CHECK(!model_->owns_storage(), "ISP provides the model's weights: its buffer must be Storage::Provided");
  optim_ = cfg.optim;
  o_.prefetch = cfg.parallel.isp.prefetch;
  o_.wdp_strategy = cfg.parallel.isp.wdp_strategy;
  shard_ = std::make_shared<ParamAndGradBuffer>(isp_shard_table(full_, wp_size()), model_->param_dtype(),
                                                model_->device());
  for (const ParamInfo& p : full_) n_layers_ = std::max(n_layers_, p.layer + 1);

  // The inner strategy reduces the shards over wdp, like plain DP or ZeRO
  // reduce whole models over dp.
  const int wdp = wdp_ ? wdp_->size() : 1;
  const ParallelConfig& p = cfg.parallel;
  if (o_.wdp_strategy == WdpStrategy::Zero) {
    if (wdp < 2)
      throw ConfigError("parallel.isp.wdp_strategy: 'zero' shards the optimizer state over the " +
                        std::to_string(wdp) + " rank(s) holding the same weight shard (world / wp); it needs at least 2");
  }
  inner_ = make_replica_sync(o_.wdp_strategy == WdpStrategy::Zero, p, cfg.optim, shard_, wdp_);
  // The global norm spans every weight shard; norms are replicated over wp.
  NormScope scope;
  scope.across = wp_;
  scope.device = model_->device();
  for (const ParamInfo& q : full_) scope.replicated.push_back(q.kind == ParamKind::Norm);
  inner_->set_norm_scope(std::move(scope));

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

IspGradSync::~IspGradSync() {
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

std::string IspGradSync::describe() const {
  return fmt::format(
      "ISP: sp {} (group {}), wp {} (group {}), weight shards reduced over wdp {} (group {}) by: {}; prefetch "
      "{}, weight pool 2 x {:.2f} MiB",
      sp_size(), sp_ ? sp_->name() : "-", wp_size(), wp_ ? wp_->name() : "-", wdp_ ? wdp_->size() : 1,
      wdp_ ? wdp_->name() : "-", inner_->describe(), o_.prefetch ? "on" : "off",
      pool_bytes() / 2 / 1048576.0);
}

int64_t IspGradSync::pool_bytes() const {
  return static_cast<int64_t>(pool_[0].bytes() + pool_[1].bytes());
}

StateBytes IspGradSync::state_bytes() const {
  StateBytes b = inner_->state_bytes();
  // The gradient scratch and its staging belong to the gradients; the weight
  // pool is reported on its own (weft_memory_bytes{kind="isp_pool"}).
  for (int s = 0; s < 2; ++s) b.grads += static_cast<int64_t>(gpool_[s].bytes() + gstage_[s].bytes());
  b.isp_pool = pool_bytes();
  return b;
}

int IspGradSync::unit_of_layer(int layer) const {
  if (layer == kEmbeddingLayer) return 0;
  if (layer == kHeadLayer) return n_layers_ + 1;
  return layer + 1;
}

int IspGradSync::layer_of_unit(int unit) const {
  if (unit == 0) return kEmbeddingLayer;
  if (unit == n_layers_ + 1) return kHeadLayer;
  return unit - 1;
}

void IspGradSync::launch_gather(int unit) {
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

void IspGradSync::wait_gather(int unit) {
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

void IspGradSync::before_use(int layer, WeightUse use) {
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
  if (!o_.prefetch) return;
  const int next = use == WeightUse::Forward ? u + 1 : u - 1;
  if (next < 0 || next > n_layers_ + 1) return;
  if (slot_unit_[next % 2] == next) return;  // still there
  if (use == WeightUse::Forward) shard_->before_use(layer_of_unit(next), use);
  launch_gather(next);
}

Tensor IspGradSync::weight(int i) {
  if (!sharded(i)) return shard_->param(i);
  const int u = unit_of_layer(full_[i].layer), s = u % 2;
  WEFT_CHECK(slot_unit_[s] == u && gathers_[s].empty(),
             "ISP: " + full_[i].name + " used outside its layer's before_use");
  return Tensor(static_cast<char*>(pool_[s].data()) + pool_offset_[i] * int64_t(dtype_size(model_->param_dtype())),
                model_->param_dtype(), full_[i].shape, model_->device());
}

Tensor IspGradSync::weight_grad(int i) {
  if (!sharded(i)) return shard_->grad(i);
  const int u = unit_of_layer(full_[i].layer), s = u % 2;
  WEFT_CHECK(gslot_unit_[s] == u, "ISP: gradient of " + full_[i].name + " written outside its layer's backward");
  return Tensor(static_cast<float*>(gpool_[s].data()) + pool_offset_[i], DType::F32, full_[i].shape,
                model_->device());
}

void IspGradSync::zero_grads() { shard_->zero_grads(); }

void IspGradSync::start() {
  inner_->start();
  // Every wp rank starts from the same replicated norm weights; the inner
  // start made the wdp group agree, these make wp agree as well. Like the
  // inner broadcast, this moves working weights only: a master copy came
  // from the same source on every rank (load_weights, load_full_weights).
  if (wp_size() > 1) {
    std::vector<comm::WorkPtr> ws;
    for (size_t i = 0; i < full_.size(); ++i)
      if (full_[i].kind == ParamKind::Norm) ws.push_back(wp_->broadcast(flat(shard_->param(int(i))), 0, "norm weights"));
    for (auto& w : ws) w->wait();
  }
}

void IspGradSync::begin_micro_batch(bool last) {
  last_micro_ = last;
  inner_->begin_micro_batch(last);
}

void IspGradSync::on_grad_ready(int param) {
  if (wp_size() == 1) return inner_->on_grad_ready(param);
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

void IspGradSync::complete_front() {
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
  inner_->on_grad_ready(p.param);
}

void IspGradSync::free_grad_slot(int slot) {
  // Pending entries are in the model's order: complete up to the slot's last.
  while (std::any_of(pending_.begin(), pending_.end(), [slot](const Pending& p) { return p.slot == slot; }))
    complete_front();
  gslot_unit_[slot] = -1;
}

double IspGradSync::finish_micro_batch(double loss) {
  while (!pending_.empty()) complete_front();
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
  for (int s = 0; s < 2; ++s) {
    if (!gathers_[s].empty()) wait_gather(slot_unit_[s]);
    slot_unit_[s] = -1;
  }
  last_ = inner_->last_step();
  last_.weight_gather_seconds = gather_spans_.busy_seconds();
  // Every wait of this step is behind us: on a GPU, one sync reads them all.
  const double gather_wait_s = gather_waits_.take_seconds(), rs_wait_s = rs_waits_.take_seconds();
  const double a2a_s = a2a_waits_.take_seconds();
  last_.prefetch_wait_seconds = gather_wait_s;
  last_.reduce_scatter_seconds = rs_spans_.busy_seconds();
  last_.all_to_all_seconds = a2a_s;
  // Gathers, reduce-scatters and the inner strategy's collectives run side
  // by side on the lanes: their union, not their sum (the all-to-alls hold
  // the compute stream and are counted as it waited).
  spans_.add(last_.spans);
  last_.comm_seconds = spans_.busy_seconds() + a2a_s;
  last_.spans = spans_;
  spans_.clear();
  gather_spans_.clear();
  rs_spans_.clear();
  last_.exposed_seconds += gather_wait_s + rs_wait_s + a2a_s;
  return norm;
}

void IspGradSync::flush() {
  inner_->state().flush();
  for (int s = 0; s < 2; ++s)
    if (!gathers_[s].empty()) wait_gather(slot_unit_[s]);
}

void IspGradSync::gather_full_weights(ParamAndGradBuffer& full) {
  flush();
  WEFT_CHECK(full.params().size() == full_.size(), "gather_full: another parameter table");
  // The inner strategy's full-precision shard (its master copy where there
  // is one, collective over wdp), then each sharded parameter's rows from
  // every wp rank, in f32 on the model's device.
  ParamAndGradBuffer part(shard_->params(), DType::F32, model_->device());
  inner_->state().gather_full_weights(part);
  for (size_t i = 0; i < full_.size(); ++i) {
    const int p = static_cast<int>(i);
    if (!sharded(p)) {
      assign(flat(full.param(p)), flat(part.param(p)));
      continue;
    }
    Buffer rows(static_cast<size_t>(full_[i].numel) * sizeof(float), model_->device());
    const Tensor all = rows.as(DType::F32, {full_[i].numel});
    wp_->all_gather(flat(part.param(p)), all, {}, "gather " + full_[i].name)->wait();
    assign(flat(full.param(p)), all);
  }
}

void IspGradSync::load_full_weights(const ParamAndGradBuffer& full) {
  WEFT_CHECK(full.params().size() == full_.size(), "load_full: another parameter table");
  // This rank's rows, as the inner strategy's full model: it loads the
  // working weights and the master copy from them.
  const int r = wp_ ? wp_->rank() : 0;
  ParamAndGradBuffer part(shard_->params(), DType::F32, Device::CPU);
  for (size_t i = 0; i < full_.size(); ++i) {
    const int p = static_cast<int>(i);
    const int64_t rows = shard_->params()[i].shape[0];
    assign(flat(part.param(p)), flat(sharded(p) ? full.param(p).slice0(r * rows, (r + 1) * rows) : full.param(p)));
  }
  inner_->state().load_full_weights(part);
}

// ---- checkpoints ------------------------------------------------------------

namespace {

// The shard buffer's flat layout read from a source in the full model's: a
// shard parameter is one contiguous range there (its rows), so a read splits
// at shard parameter boundaries and maps each piece.
class ShardLayoutSource : public WeightSource {
 public:
  ShardLayoutSource(const WeightSource& full, const std::vector<ParamInfo>& shard,
                    std::function<int64_t(int64_t)> model_offset)
      : full_(full), shard_(shard), model_offset_(std::move(model_offset)) {}
  void read(int64_t offset, Tensor dst) const override {
    const int64_t n = dst.numel();
    for (int64_t done = 0; done < n;) {
      const int64_t at = offset + done;
      auto it = std::upper_bound(shard_.begin(), shard_.end(), at,
                                 [](int64_t o, const ParamInfo& p) { return o < p.offset; });
      WEFT_CHECK(it != shard_.begin(), "ISP weights: offset " + std::to_string(at) + " outside the shard");
      --it;
      const int64_t take = std::min(n - done, it->offset + it->numel - at);
      WEFT_CHECK(take > 0, "ISP weights: [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
                               ") extends past the shard");
      full_.read(model_offset_(at), Tensor::f32(dst.f32() + done, {take}));
      done += take;
    }
  }

 private:
  const WeightSource& full_;
  const std::vector<ParamInfo>& shard_;
  std::function<int64_t(int64_t)> model_offset_;
};

}  // namespace

bool IspGradSync::load_weights(const WeightSource& src) {
  // A sharded parameter's rows [r * rows, (r + 1) * rows) are one contiguous
  // range of the full model's: read just those, into the working weights
  // and, at full precision, into the inner optimizer's master copy (if any).
  const int r = wp_ ? wp_->rank() : 0;
  for (size_t i = 0; i < full_.size(); ++i) {
    const int p = static_cast<int>(i);
    const int64_t n = shard_->params()[i].numel;
    src.read_into(full_[i].offset + (sharded(p) ? int64_t(r) * n : 0), shard_->param(p));
  }
  inner_->state().optimizer().load_master(
      ShardLayoutSource(src, shard_->params(), [this](int64_t at) { return model_offset(at); }));
  return true;
}

int IspGradSync::param_at(int64_t shard_offset) const {
  const auto& t = shard_->params();
  auto it = std::upper_bound(t.begin(), t.end(), shard_offset,
                             [](int64_t o, const ParamInfo& p) { return o < p.offset; });
  return std::max(0, static_cast<int>(it - t.begin()) - 1);
}

int64_t IspGradSync::model_offset(int64_t shard_offset) const {
  const int i = param_at(shard_offset);
  const ParamInfo& s = shard_->params()[i];
  const int64_t rows_before = sharded(i) ? int64_t(wp_->rank()) * s.numel : 0;
  return full_[i].offset + rows_before + (shard_offset - s.offset);
}

AdamW IspGradSync::export_state(bool owned_only, bool weights) {
  flush();
  const AdamW& opt = inner_->state().optimizer();
  // Replicated state is written once: norms by wp rank 0, and with plain DP
  // over wdp (every wdp rank holds the same state) by wdp rank 0.
  const bool wdp_first = !wdp_ || wdp_->rank() == 0 || inner_->state().optimizer_shards() > 1;
  const bool wp_first = !wp_ || wp_->rank() == 0;
  std::vector<ParamRange> ranges;
  std::vector<size_t> from;
  for (size_t i = 0; i < opt.ranges().size(); ++i) {
    const ParamRange& r = opt.ranges()[i];
    const bool norm = full_[param_at(r.offset)].kind == ParamKind::Norm;
    if (owned_only && (!wdp_first || (norm && !wp_first))) continue;
    ranges.push_back({model_offset(r.offset), r.numel, r.decay});
    from.push_back(i);
  }
  AdamW out(optim_, ranges, Device::CPU, /*master_weights=*/weights);
  const Tensor shard_params = weights ? shard_->flat_params() : Tensor();
  for (size_t k = 0; k < from.size(); ++k) {
    const int64_t n = ranges[k].numel, src = opt.state_offset(from[k]), dst = out.state_offset(k);
    ops::transfer(out.exp_avg().slice0(dst, dst + n), opt.exp_avg().slice0(src, src + n));
    ops::transfer(out.exp_avg_sq().slice0(dst, dst + n), opt.exp_avg_sq().slice0(src, src + n));
    if (weights) {
      // The master copy where there is one (bf16 working weights), else the
      // f32 working weights of the range (in the shard's layout).
      const int64_t at = opt.ranges()[from[k]].offset;
      assign(out.master().slice0(dst, dst + n),
             opt.has_master() ? opt.master().slice0(src, src + n) : shard_params.slice0(at, at + n));
    }
  }
  out.set_step_count(opt.step_count());
  return out;
}

void IspGradSync::import_optimizer(const AdamW& state) {
  AdamW& opt = inner_->state().optimizer();
  WEFT_CHECK(state.ranges().size() == opt.ranges().size(), "import_optimizer: another range list");
  for (size_t k = 0; k < opt.ranges().size(); ++k) {
    const int64_t n = opt.ranges()[k].numel, src = state.state_offset(k), dst = opt.state_offset(k);
    WEFT_CHECK(state.ranges()[k].numel == n, "import_optimizer: another range list");
    ops::transfer(opt.exp_avg().slice0(dst, dst + n), state.exp_avg().slice0(src, src + n));
    ops::transfer(opt.exp_avg_sq().slice0(dst, dst + n), state.exp_avg_sq().slice0(src, src + n));
  }
  opt.set_step_count(state.step_count());
}

// ---- Ulysses all-to-all ------------------------------------------------------

void IspGradSync::to_heads(Tensor out, const Tensor& in) { exchange(out, in, true); }
void IspGradSync::to_sequence(Tensor out, const Tensor& in) { exchange(out, in, false); }

// to_heads: in [B, T, H, D] (T = S/n, this rank's positions) -> out [B, S, H/n, D].
// Chunk j of the send buffer is [B, T, H/n, D]: this rank's positions of head
// group j; chunk src of the receive buffer is rank src's positions of this
// rank's heads. to_sequence is the same exchange read the other way round.
// Packing and unpacking swap two leading dimensions of a 3-D view (rows of
// R elements; ops::swap_leading_dims), on whatever device the activations
// are, in their dtype; the compute stream waits for the exchange, which is
// timed as it sees it (ops::StreamWaits).
void IspGradSync::exchange(Tensor out, const Tensor& in, bool to_heads) {
  const int n = sp_size();
  WEFT_CHECK(in.dtype == out.dtype && in.device == out.device && in.device == model_->device(),
             "ISP all-to-all: tensors of one dtype on the model's device");
  const Tensor& seq = to_heads ? in : out;   // [B, T, H, D]
  const Tensor& head = to_heads ? out : in;  // [B, S, H/n, D]
  const int64_t B = seq.dim(0), T = seq.dim(1), H = seq.dim(2), D = seq.dim(3), Hn = H / n;
  WEFT_CHECK(head.dim(0) == B && head.dim(1) == T * n && head.dim(2) == Hn && head.dim(3) == D,
             "ISP all-to-all: shapes " + seq.shape.str() + " and " + head.shape.str() + " do not match sp " +
                 std::to_string(n));
  const size_t bytes = in.nbytes();
  if (send_.bytes() < bytes) {
    send_ = Buffer(bytes, in.device);
    recv_ = Buffer(bytes, in.device);
  }
  const Tensor send = send_.as(in.dtype, {in.numel()}), recv = recv_.as(in.dtype, {in.numel()});
  // Staged as [n chunks][B][T] rows of one position of one head group.
  if (to_heads)
    ops::swap_leading_dims(send, in, B * T, n);  // [B T, n, Hn D] -> [n, B T, Hn D]
  else
    ops::swap_leading_dims(send, in, B, n);  // [B, n, T Hn D] -> [n, B, T Hn D]
  a2a_waits_.time([&] {
    sp_->all_to_all(send, recv, {}, {}, to_heads ? "all_to_all heads" : "all_to_all sequence")->wait();
  });
  if (to_heads)
    ops::swap_leading_dims(out, recv, n, B);  // [n, B, T Hn D] -> [B, n, T Hn D]
  else
    ops::swap_leading_dims(out, recv, n, B * T);  // [n, B T, Hn D] -> [B T, n, Hn D]
}

}  // namespace weft
