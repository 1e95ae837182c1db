#include "train/trainer.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "train/checkpoint.h"

namespace weft {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string hms(double s) {
  long t = std::lround(std::max(0.0, s));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

int64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace

Trainer::Trainer(const WorkerConfig& cfg, RankInfo rank)
    : cfg_(cfg),
      rank_(rank),
      source_(make_source(cfg)),
      model_(cfg.model),
      opt_(cfg.optim, default_param_ranges(model_.params(), cfg.optim), model_.num_params()) {
  if (source_->vocab_size() > cfg.model.vocab_size)
    throw ConfigError("model.vocab_size: " + std::to_string(cfg.model.vocab_size) +
                      " is smaller than the data's vocabulary (" +
                      std::to_string(source_->vocab_size()) + " tokens in " + source_->describe() +
                      ")");
  model_.init(cfg.train.seed);
}

std::string Trainer::checkpoint_dir() const {
  return cfg_.checkpoint.dir.empty() ? cfg_.train.out_dir + "/checkpoints" : cfg_.checkpoint.dir;
}

void Trainer::log_progress(int64_t step, double loss, double lr, double norm, double step_seconds,
                           double elapsed, int64_t steps_this_run) const {
  const TrainConfig& t = cfg_.train;
  const double tokens = double(t.micro_batch) * t.seq_len * t.grad_accum * rank_.world;
  const double eta = elapsed / std::max<int64_t>(1, steps_this_run) * (t.steps - step - 1);
  spdlog::info("step {:>{}}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | ETA {}",
               step + 1, std::to_string(t.steps).size(), t.steps, loss, lr, norm,
               tokens / step_seconds, hms(eta));
}

TrainSummary Trainer::run(const std::atomic<int>* stop) {
  const TrainConfig& t = cfg_.train;
  TrainSummary s;
  s.num_params = model_.num_params();
  s.entropy_floor = source_->entropy_floor();
  spdlog::info("model: {} parameters ({} layers, d_model {}, heads {}/{} kv, ffn {}, vocab {})",
               s.num_params, cfg_.model.n_layers, cfg_.model.d_model, cfg_.model.n_heads,
               cfg_.model.n_kv_heads, cfg_.model.ffn(), cfg_.model.vocab_size);
  spdlog::info("data: {}", source_->describe());

  const std::string ckpt_dir = checkpoint_dir();
  if (cfg_.checkpoint.resume) {
    if (auto meta = load_latest_checkpoint(ckpt_dir, model_, opt_, rank_.rank)) {
      s.start_step = meta->step;
      spdlog::info("resumed from {}/step-{} (loss {:.4f})", ckpt_dir, meta->step, meta->last_loss);
    }
  }

  Batch batch;
  const int B = t.micro_batch, T = t.seq_len;
  const float loss_scale = 1.0f / (float(B) * T * t.grad_accum);
  const auto t0 = Clock::now();
  auto save = [&](int64_t steps_completed, double last_loss) {
    CheckpointMeta meta;
    meta.step = steps_completed;
    meta.last_loss = last_loss;
    meta.world_size = rank_.world;
    meta.config_yaml = to_yaml(cfg_);
    const auto tc = Clock::now();
    s.last_checkpoint = save_checkpoint(ckpt_dir, model_, opt_, meta, cfg_.checkpoint.keep, rank_.rank);
    s.checkpoint_seconds += seconds_since(tc);
    spdlog::info("checkpoint written: {}", s.last_checkpoint);
  };

  int64_t step = s.start_step;
  double loss = 0;
  for (; step < t.steps; ++step) {
    if (stop && stop->load()) {
      s.stopped_early = true;
      break;
    }
    const auto ts = Clock::now();
    model_.zero_grads();
    loss = 0;
    for (int micro = 0; micro < t.grad_accum; ++micro) {
      auto tp = Clock::now();
      source_->fill(batch, B, T, BatchIndex{step, micro, t.grad_accum, rank_.rank, rank_.world});
      s.data_seconds += seconds_since(tp);
      tp = Clock::now();
      loss += model_.forward(batch.inputs.data(), batch.targets.data(), B, T) / t.grad_accum;
      s.forward_seconds += seconds_since(tp);
      tp = Clock::now();
      model_.backward(loss_scale);
      s.backward_seconds += seconds_since(tp);
    }
    const auto to = Clock::now();
    const double norm = clip_grad_norm(model_.flat_grads(), cfg_.optim.grad_clip);
    const double lr = lr_at(cfg_.optim, step, t.steps);
    opt_.step(model_.flat_params(), model_.flat_grads(), lr);
    s.optimizer_seconds += seconds_since(to);
    s.step_seconds.push_back(seconds_since(ts));
    if (!std::isfinite(loss))
      throw std::runtime_error("loss is " + std::to_string(loss) + " at step " +
                               std::to_string(step + 1) + "; lower optim.lr or check the data");
    s.losses.push_back(loss);
    const int64_t done = step - s.start_step + 1;
    if (t.log_every > 0 && ((step + 1) % t.log_every == 0 || step + 1 == t.steps))
      log_progress(step, loss, lr, norm, seconds_since(ts), seconds_since(t0), done);
    if (cfg_.checkpoint.every > 0 && (step + 1) % cfg_.checkpoint.every == 0 && step + 1 < t.steps)
      save(step + 1, loss);
  }
  s.steps_done = step;
  s.wall_seconds = seconds_since(t0);
  s.tokens = (step - s.start_step) * int64_t(B) * T * t.grad_accum * rank_.world;
  s.tokens_per_second = s.wall_seconds > 0 ? s.tokens / s.wall_seconds : 0;
  s.final_loss = s.losses.empty() ? 0 : s.losses.back();
  const size_t tail = std::min<size_t>(10, s.losses.size());
  for (size_t i = s.losses.size() - tail; i < s.losses.size(); ++i) s.tail_loss += s.losses[i] / tail;
  if (step > s.start_step || s.stopped_early) save(step, s.final_loss);
  s.peak_rss_bytes = peak_rss_bytes();

  spdlog::info("{} after {} steps: loss {:.4f} (last {} mean {:.4f}{}), {:.0f} tok/s, {} wall, peak RSS {:.0f} MiB",
               s.stopped_early ? "stopped" : "done", s.steps_done, s.final_loss, tail, s.tail_loss,
               s.entropy_floor >= 0 ? fmt::format(", floor {:.4f}, gap {:.4f}", s.entropy_floor,
                                                  s.tail_loss - s.entropy_floor)
                                    : std::string(),
               s.tokens_per_second, hms(s.wall_seconds), s.peak_rss_bytes / 1048576.0);
  if (rank_.rank == 0) write_summary(s);
  return s;
}

void Trainer::write_summary(const TrainSummary& s) const {
  namespace fs = std::filesystem;
  fs::create_directories(cfg_.train.out_dir);
  nlohmann::json j = {{"start_step", s.start_step},
                      {"steps_done", s.steps_done},
                      {"steps", cfg_.train.steps},
                      {"final_loss", s.final_loss},
                      {"tail_loss", s.tail_loss},
                      {"entropy_floor", s.entropy_floor},
                      {"tokens_per_second", s.tokens_per_second},
                      {"wall_seconds", s.wall_seconds},
                      {"tokens", s.tokens},
                      {"num_params", s.num_params},
                      {"peak_rss_bytes", s.peak_rss_bytes},
                      {"stopped_early", s.stopped_early},
                      {"last_checkpoint", s.last_checkpoint},
                      {"world_size", rank_.world},
                      {"phase_seconds",
                       {{"data", s.data_seconds},
                        {"forward", s.forward_seconds},
                        {"backward", s.backward_seconds},
                        {"optimizer", s.optimizer_seconds},
                        {"checkpoint", s.checkpoint_seconds}}},
                      {"losses", s.losses},
                      {"step_seconds", s.step_seconds}};
  const fs::path path = fs::path(cfg_.train.out_dir) / "summary.json";
  std::ofstream out(path.string() + ".tmp");
  out << j.dump(2) << "\n";
  out.close();
  fs::rename(path.string() + ".tmp", path);
}

}  // namespace weft
