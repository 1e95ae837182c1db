// Writes what the PyTorch cross-check needs: the initial weights
// (weights.safetensors, HF names), one batch from the configured data source
// (batch.safetensors: inputs, targets as I32 [B, T]) and weft's loss and
// gradients for it (grads.safetensors, HF names, loss in the metadata).
// --batches N also writes the batches of N steps; --batches-only writes just
// those (the GPU speed harness trains PyTorch on weft's batches);
// --eval-batches writes the held-out set of eval.* (the evaluation check).
// With --init-from the weights are a Hugging Face directory's (a weft
// checkpoint or a save_pretrained one) instead of the seeded init.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "data/source.h"
#include "model/llama.h"
#include "train/checkpoint.h"
#include "train/hf_weights.h"
#include "config/config.h"
#include "train/safetensors.h"

namespace {

// FILE: inputs.<step>.<rank> / targets.<step>.<rank>, [B, T], exactly what
// rank r of `world` reads from `source` at step s (grad_accum 1).
void write_batches(weft::TokenSource& source, const weft::WorkerConfig& cfg, int steps, int world,
                   const std::string& file) {
  const int B = cfg.train.micro_batch, T = cfg.train.seq_len;
  std::vector<weft::Batch> all(static_cast<size_t>(steps) * world);
  weft::SafetensorsWriter w;
  for (int st = 0; st < steps; ++st) {
    for (int r = 0; r < world; ++r) {
      weft::Batch& b = all[static_cast<size_t>(st) * world + r];
      source.fill(b, B, T, weft::BatchIndex{st, 0, 1, r, world});
      const std::string key = std::to_string(st) + "." + std::to_string(r);
      w.add("inputs." + key, weft::DType::I32, {B, T}, b.inputs.data());
      w.add("targets." + key, weft::DType::I32, {B, T}, b.targets.data());
    }
  }
  w.write(file);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weft-reference-dump"};
  std::string config_path, out, init_from;
  int batch_steps = 0, world = 1;
  bool batches_only = false, eval_batches = false;
  app.add_option("--config", config_path)->required();
  app.add_option("--out", out)->required();
  app.add_option("--batches", batch_steps, "also write the batches of this many steps")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--init-from", init_from, "Hugging Face Llama directory to take the weights from");
  app.add_option("--world", world, "ranks the batches are split over")->check(CLI::PositiveNumber);
  app.add_flag("--eval-batches", eval_batches,
               "also write eval_batches.safetensors: the held-out set of eval.* (inputs.<k>.0 / targets.<k>.0)");
  app.add_flag("--batches-only", batches_only,
               "write only batches.safetensors (no model: what a harness needs to train a peer on weft's batches)");
  CLI11_PARSE(app, argc, argv);

  weft::WorkerConfig cfg = weft::load_config_file(config_path, init_from);
  weft::validate(cfg);
  std::filesystem::create_directories(out);
  auto source = weft::make_source(cfg);
  if (batches_only && batch_steps == 0) {
    std::fprintf(stderr, "weft-reference-dump: --batches-only needs --batches N\n");
    return 1;
  }
  if (batches_only) {
    write_batches(*source, cfg, batch_steps, world, out + "/batches.safetensors");
    return 0;
  }
  weft::Llama model(cfg.model);
  model.init(cfg.train.seed);
  if (!cfg.init_from.empty()) weft::load_hf_weights(weft::HfWeights::open(cfg.init_from), model);
  weft::save_model_weights(out + "/weights.safetensors", model);
  {
    std::ofstream resolved(out + "/config.yaml");
    resolved << weft::to_yaml(cfg);
  }

  const int B = cfg.train.micro_batch, T = cfg.train.seq_len;
  weft::Batch batch;
  source->fill(batch, B, T, weft::BatchIndex{});
  weft::SafetensorsWriter bw;
  bw.add("inputs", weft::DType::I32, {B, T}, batch.inputs.data());
  bw.add("targets", weft::DType::I32, {B, T}, batch.targets.data());
  bw.write(out + "/batch.safetensors");

  if (batch_steps > 0) write_batches(*source, cfg, batch_steps, world, out + "/batches.safetensors");
  // The fixed held-out set every evaluation reads: batch k is the batch of
  // "step" k on one rank (train/trainer.h, evaluate).
  if (eval_batches)
    write_batches(*weft::make_eval_source(cfg), cfg, cfg.eval.batches, 1, out + "/eval_batches.safetensors");

  double loss = model.forward(batch.inputs.data(), batch.targets.data(), B, T,
                              batch.doc_starts.empty() ? nullptr : batch.doc_starts.data());
  model.zero_grads();
  model.backward(1.0f / (float(B) * T));
  weft::SafetensorsWriter gw;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", loss);
  gw.set_metadata("loss", buf);
  for (size_t i = 0; i < model.params().size(); ++i)
    gw.add(model.params()[i].name, model.grad(static_cast<int>(i)));
  gw.write(out + "/grads.safetensors");
  std::printf("loss %.9f, %lld parameters\n", loss, static_cast<long long>(model.num_params()));
  return 0;
}
