// Training on the GPU: the tiny preset with bf16 working weights on the device
// tracks the CPU's bf16 and f32 runs, and one rank drives the whole
// data-parallel path (bucket hook, NCCL on its comm stream, overlap
// accounting) over a single-rank NCCL group.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

#include <unistd.h>

#include "gpu_test_util.h"

#ifdef WEFT_HAVE_CUDA
#include "model/llama.h"
#include "parallel/data_parallel.h"
#include "parallel/grad_sync.h"
#include "parallel/local_sync.h"
#include "train/trainer.h"
#endif
#ifdef WEFT_HAVE_NCCL
#include "comm/comm_context.h"
#include "comm/nccl_communicator.h"
#endif

namespace weft::gpu_test {
namespace {

#ifdef WEFT_HAVE_CUDA
namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("weft_gpu_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

WorkerConfig tiny(const fs::path& out, const std::string& device, const std::string& dtype) {
  WorkerConfig c = preset("tiny");
  c.device = *contract::parse_mode<ComputeDevice>(device);
  c.train.dtype = *contract::parse_mode<WorkingDtype>(dtype);
  c.train.steps = 50;
  c.train.log_every = 10;
  c.train.out_dir = out.string();
  c.metrics.port = 0;
  // As weft-worker would: gpu_checks.sh sets WEFT_ATTENTION=cudnn, so these
  // runs use cuDNN or fail rather than fall back to the SIMT kernels.
  const char* attention = std::getenv("WEFT_ATTENTION");
  apply_env_overrides(c, {{"WEFT_ATTENTION", attention ? attention : ""}});
  return c;
}

// Both bf16 runs round at the same places; they differ by fp32 summation
// order (cuBLASLt tiles, warp reductions, atomics) only, which bf16 rounding
// then amplifies: 2 % per step is the documented bound (docs/cuda.md), the
// same as bf16 against f32 on the CPU.
TEST(GpuTraining, TinyPresetTracksTheCpuRuns) {
  WEFT_REQUIRE_GPU();
  const fs::path dir = scratch("tiny");
  const TrainSummary cpu_f32 = Trainer(tiny(dir / "cpu_f32", "cpu", "f32")).run();
  const TrainSummary cpu_bf16 = Trainer(tiny(dir / "cpu_bf16", "cpu", "bf16")).run();
  Trainer gpu_trainer(tiny(dir / "gpu", "cuda", "auto"));
  ASSERT_EQ(gpu_trainer.model().buffer().device(), Device::CUDA);
  ASSERT_EQ(gpu_trainer.model().buffer().param_dtype(), DType::BF16) << "auto on cuda is bf16";
  const TrainSummary gpu = gpu_trainer.run();
  ASSERT_EQ(gpu.losses.size(), 50u);
  double worst_bf16 = 0, worst_f32 = 0;
  for (size_t i = 0; i < 50; ++i) {
    const double rb = std::abs(gpu.losses[i] - cpu_bf16.losses[i]) / cpu_bf16.losses[i];
    const double rf = std::abs(gpu.losses[i] - cpu_f32.losses[i]) / cpu_f32.losses[i];
    worst_bf16 = std::max(worst_bf16, rb);
    worst_f32 = std::max(worst_f32, rf);
    EXPECT_LT(rb, 0.02) << "step " << i + 1 << ": gpu " << gpu.losses[i] << ", cpu bf16 " << cpu_bf16.losses[i];
    EXPECT_LT(rf, 0.02) << "step " << i + 1 << ": gpu " << gpu.losses[i] << ", cpu f32 " << cpu_f32.losses[i];
  }
  std::printf(
      "tiny, 50 steps: final loss gpu %.4f, cpu bf16 %.4f, cpu f32 %.4f; worst relative step difference vs cpu "
      "bf16 %.3g, vs cpu f32 %.3g; tok/s gpu %.0f, cpu bf16 %.0f, cpu f32 %.0f\n",
      gpu.losses.back(), cpu_bf16.losses.back(), cpu_f32.losses.back(), worst_bf16, worst_f32, gpu.tokens_per_second,
      cpu_bf16.tokens_per_second, cpu_f32.tokens_per_second);
  // The state the GPU holds: bf16 weights, f32 gradients, moments and master.
  EXPECT_EQ(gpu.memory.params, 2 * gpu.num_params);
  EXPECT_EQ(gpu.memory.grads, 4 * gpu.num_params);
  EXPECT_EQ(gpu.memory.optimizer, 12 * gpu.num_params);
  const ops::CudaMemory mem = ops::cuda_memory();
  EXPECT_GE(mem.held, mem.in_use);
  std::printf("device allocator: %.1f MiB held, %.1f MiB in use\n", mem.held / 1048576.0, mem.in_use / 1048576.0);
  fs::remove_all(dir);
}

// Runs `c` to step 8 with a checkpoint into `out`, then on to step 20 from
// it, and returns the resumed run. The embedding and norm weight gradients
// use fp32 atomics: its losses equal an uninterrupted run's to rounding, not
// bit for bit.
TrainSummary resumed_at_8(WorkerConfig c, const fs::path& out, const TrainSummary& uninterrupted) {
  c.train.out_dir = out.string();
  c.checkpoint.every = 8;
  c.train.steps = 8;
  Trainer(c).run();
  c.train.steps = 20;
  TrainSummary b = Trainer(c).run();
  EXPECT_EQ(b.start_step, 8);
  EXPECT_EQ(b.losses.size(), 12u);
  for (size_t i = 0; i < std::min<size_t>(12, b.losses.size()); ++i)
    EXPECT_NEAR(b.losses[i], uninterrupted.losses[8 + i], 1e-3 * uninterrupted.losses[8 + i]) << "step " << 9 + i;
  return b;
}

// A GPU run's checkpoint resumes exactly on the GPU too (master weights in the
// file, optimizer state through the host).
TEST(GpuTraining, ResumeMatchesUninterruptedRun) {
  WEFT_REQUIRE_GPU();
  const fs::path dir = scratch("resume");
  WorkerConfig c = tiny(dir / "full", "cuda", "bf16");
  c.train.steps = 20;
  const TrainSummary ref = Trainer(c).run();
  resumed_at_8(c, dir / "part", ref);
  fs::remove_all(dir);
}

// ISP on one GPU (every group of one rank, so no exchange and no pool): the
// model borrows its weights from ISP's shard buffer on the device, bf16 with
// the master copy in the inner optimizer, and checkpoints go through the
// host. It trains what DP trains on the same GPU and resumes.
TEST(GpuTraining, IspOnOneGpuTrainsLikeDpAndResumes) {
  WEFT_REQUIRE_GPU();
  const fs::path dir = scratch("isp");
  WorkerConfig c = tiny(dir / "dp", "cuda", "bf16");
  c.train.steps = 20;
  const TrainSummary dp = Trainer(c).run();
  c.parallel.strategy = Strategy::Isp;
  c.train.out_dir = (dir / "isp").string();
  const TrainSummary isp = Trainer(c).run();
  ASSERT_EQ(isp.losses.size(), 20u);
  for (size_t i = 0; i < 20; ++i)
    EXPECT_NEAR(isp.losses[i], dp.losses[i], 1e-3 * dp.losses[i]) << "step " << i + 1;
  const TrainSummary b = resumed_at_8(c, dir / "part", isp);
  std::printf("isp on one gpu, 20 steps: final loss %.4f (dp %.4f); resumed at 8: final %.4f\n", isp.losses.back(),
              dp.losses.back(), b.losses.empty() ? 0.0 : b.losses.back());
  fs::remove_all(dir);
}

// Pointwise recompute on the device (train.recompute's auto on cuda): the
// RMSNorm and SwiGLU kernels form the same bf16 outputs again in backward, so
// the loss is bit-identical and the gradients equal up to the order of the
// kernels' atomic adds, in [B*T, 2 d + ffn] less memory per block.
TEST(GpuTraining, PointwiseRecomputeGivesTheKeptActivationsGradients) {
  WEFT_REQUIRE_GPU();
  const ModelConfig cfg = preset("gpt2-124m").model;
  const int B = 2, T = 256;
  std::vector<int32_t> in(B * T), tgt(B * T);
  for (int i = 0; i < B * T; ++i) {
    in[i] = (i * 7919) % cfg.vocab_size;
    tgt[i] = (i * 104729 + 13) % cfg.vocab_size;
  }
  Llama host(cfg);
  host.init(3);
  auto run = [&](bool pointwise, double* loss, size_t* act_bytes) {
    Llama m(cfg, std::make_shared<ParamAndGradBuffer>(llama_param_table(cfg), DType::BF16, Device::CUDA));
    assign(m.flat_params(), host.flat_params());
    m.set_recompute_pointwise(pointwise);
    *loss = m.forward(in.data(), tgt.data(), B, T);
    *act_bytes = m.activation_bytes();
    m.zero_grads();
    m.backward(1.0f / (B * T));
    OwnedTensor g(DType::F32, {m.num_params()});
    assign(g.t, m.flat_grads());
    return std::vector<float>(g.f32(), g.f32() + g.numel());
  };
  double kept_loss = 0, pw_loss = 0;
  size_t kept_bytes = 0, pw_bytes = 0;
  const std::vector<float> kept = run(false, &kept_loss, &kept_bytes);
  const std::vector<float> pw = run(true, &pw_loss, &pw_bytes);
  EXPECT_EQ(pw_loss, kept_loss);
  const int64_t C = cfg.d_model, F = cfg.ffn(), N = int64_t(B) * T;
  EXPECT_EQ(static_cast<int64_t>(kept_bytes - pw_bytes), (cfg.n_layers * (2 * C + F) - (C + F)) * N * 2);
  double worst = 0, scale = 0;
  size_t differ = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    scale = std::max(scale, double(std::fabs(kept[i])));
    worst = std::max(worst, double(std::fabs(kept[i] - pw[i])));
    differ += kept[i] != pw[i];
  }
  EXPECT_LE(worst, 1e-5 * scale) << "largest gradient " << scale;
  std::printf("pointwise recompute, gpt2-124m B %d T %d: loss %.6f both; %zu of %zu gradients differ (worst %.3g of "
              "%.3g); activations %.1f -> %.1f MiB\n",
              B, T, kept_loss, differ, kept.size(), worst, scale, kept_bytes / 1048576.0, pw_bytes / 1048576.0);
}

// One forward and backward of `cfg`'s model from the same initial weights on
// the CPU and on the GPU, both in f32 (no TF32: cuBLASLt computes in fp32),
// with the attention mode Auto whatever an earlier test left (gpu_checks.sh
// runs with cudnn): f32, and packed documents in any dtype, pick the SIMT
// kernels there.
struct DeviceRun {
  double loss = 0;
  std::vector<float> grads;
};
struct CpuGpuRuns {
  const ModelConfig& cfg;
  int B, T;
  std::vector<int32_t> in, tgt;
  Llama host;

  CpuGpuRuns(const ModelConfig& c, int b, int t) : cfg(c), B(b), T(t), in(b * t), tgt(b * t), host(c) {
    for (int i = 0; i < B * T; ++i) {
      in[i] = (i * 7919) % cfg.vocab_size;
      tgt[i] = (i * 104729 + 13) % cfg.vocab_size;
    }
    host.init(5);
  }
  DeviceRun run(Device device, const int32_t* doc_starts = nullptr) {
    const ops::AttentionMode mode = ops::attention_mode();
    ops::set_attention_mode(ops::AttentionMode::Auto);
    Llama m(cfg, std::make_shared<ParamAndGradBuffer>(llama_param_table(cfg), DType::F32, device));
    assign(m.flat_params(), host.flat_params());
    DeviceRun r;
    r.loss = m.forward(in.data(), tgt.data(), B, T, doc_starts);
    m.zero_grads();
    m.backward(1.0f / (B * T));
    OwnedTensor g(DType::F32, {m.num_params()});
    assign(g.t, m.flat_grads());
    r.grads.assign(g.f32(), g.f32() + g.numel());
    ops::set_attention_mode(mode);
    return r;
  }
};

// The GPU run's loss within 1e-5 and every gradient within 1e-4 of the
// largest, against the CPU run; prints both for the run's log.
void expect_gpu_matches_cpu(const char* what, const DeviceRun& cpu, const DeviceRun& gpu) {
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * cpu.loss) << what;
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size()) << what;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    scale = std::max(scale, double(std::fabs(cpu.grads[i])));
    worst = std::max(worst, double(std::fabs(cpu.grads[i] - gpu.grads[i])));
  }
  EXPECT_LE(worst, 1e-4 * scale) << what << ": largest gradient " << scale;
  std::printf("%s: loss gpu %.6f cpu %.6f; worst gradient difference %.3g of %.3g\n", what, gpu.loss, cpu.loss,
              worst, scale);
}

// Packed documents on the device: the tiny preset's model with documents cut
// inside rows and across the 32-row attention tiles gives the CPU model's
// loss and gradients; without the documents the loss differs, so the starts
// reached the kernels.
TEST(GpuTraining, PackedDocumentsMatchTheCpuModel) {
  WEFT_REQUIRE_GPU();
  const ModelConfig cfg = preset("tiny").model;
  CpuGpuRuns runs(cfg, 2, std::min<int>(128, cfg.max_seq_len));
  std::vector<int32_t> starts(runs.B * runs.T);
  for (int b = 0; b < runs.B; ++b) {
    int start = 0;
    for (int t = 0; t < runs.T; ++t) {
      if (t == 1 || t == 20 + b || t == 32 || t == 33 || t == 90) start = t;
      starts[b * runs.T + t] = start;
    }
  }
  const DeviceRun gpu = runs.run(Device::CUDA, starts.data());
  expect_gpu_matches_cpu("packed documents, tiny model", runs.run(Device::CPU, starts.data()), gpu);
  const DeviceRun whole = runs.run(Device::CUDA);
  EXPECT_GT(std::fabs(whole.loss - gpu.loss), 1e-4) << "the documents changed nothing";
}

// A Llama 3 shape on the device: llama3 RoPE scaling and a head_dim apart
// from d_model / n_heads (4 heads x 48 over d_model 128, GQA 2 KV heads,
// tied embeddings) give the CPU model's loss and gradients; unscaled RoPE
// gives another loss, so the scaling reached the kernels.
TEST(GpuTraining, Llama3RopeAndHeadDimMatchTheCpuModel) {
  WEFT_REQUIRE_GPU();
  ModelConfig cfg = preset("tiny").model;
  cfg.explicit_head_dim = 48;
  cfg.n_heads = 4;
  cfg.n_kv_heads = 2;
  cfg.tie_embeddings = true;
  cfg.rope_scaling = {"llama3", 32, 1, 4, 16};
  ASSERT_NE(cfg.head_dim(), cfg.d_model / cfg.n_heads);
  CpuGpuRuns runs(cfg, 2, std::min<int>(96, cfg.max_seq_len));
  const DeviceRun gpu = runs.run(Device::CUDA);
  expect_gpu_matches_cpu("llama3 rope, head_dim 48, tiny model", runs.run(Device::CPU), gpu);
  ModelConfig unscaled = cfg;
  unscaled.rope_scaling = {};
  CpuGpuRuns plain(unscaled, runs.B, runs.T);
  EXPECT_GT(std::fabs(plain.run(Device::CUDA).loss - gpu.loss), 1e-5) << "the llama3 scaling changed nothing";
}
#else
TEST(GpuTraining, TinyPresetTracksTheCpuRuns) { GTEST_SKIP() << "weft was built without CUDA"; }
#endif

#if defined(WEFT_HAVE_CUDA) && defined(WEFT_HAVE_NCCL)
// One rank through DataParallel over a one-member NCCL group: bucket hooks
// launch all-reduces on the comm stream while backward runs, and the result
// equals LocalGradSync's (an average over one rank is the identity).
TEST(GpuTraining, SingleRankNcclDataParallelPath) {
  WEFT_REQUIRE_GPU();
  WorkerConfig cfg = preset("tiny");
  cfg.device = ComputeDevice::Cuda;
  cfg.parallel.bucket_cap_mb = 0.25;  // several buckets for 0.9 M parameters
  const int B = 8, T = 64, steps = 10;
  std::vector<int32_t> tokens = random_tokens(B * T, cfg.model.vocab_size, 11);
  std::vector<int32_t> targets = random_tokens(B * T, cfg.model.vocab_size, 12);
  Llama init(cfg.model);
  init.init(cfg.train.seed);

  auto train = [&](GradSync& sync, Llama& model) {
    sync.state().load_full_weights(init.buffer());
    sync.start();
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
      const double lr = lr_at(cfg.optim, s, steps);
      sync.prepare_step(lr, cfg.optim.grad_clip);
      model.zero_grads();
      sync.begin_micro_batch(true);
      double loss = model.forward(tokens.data(), targets.data(), B, T);
      model.backward(1.0f / (B * T), [&sync](int i) { sync.on_grad_ready(i); });
      loss = sync.finish_micro_batch(loss);
      sync.clip_and_step(lr, cfg.optim.grad_clip);
      losses.push_back(loss);
    }
    return losses;
  };

  auto local_buf = std::make_shared<ParamAndGradBuffer>(llama_param_table(cfg.model), DType::BF16, Device::CUDA);
  Llama local_model(cfg.model, local_buf);
  LocalGradSync local(local_buf, cfg.optim);
  const std::vector<double> want = train(local, local_model);

  comm::CommContext ctx(std::chrono::milliseconds(60000), comm::FailurePolicy::Throw);
  auto nccl = comm::NcclCommunicator::create(ctx, nullptr, "dp", {0}, 0);
  nccl->set_compute_stream(static_cast<CUstream_st*>(ops::cuda_compute_stream()));
  auto dp_buf = std::make_shared<ParamAndGradBuffer>(llama_param_table(cfg.model), DType::BF16, Device::CUDA);
  Llama dp_model(cfg.model, dp_buf);
  DataParallel dp(dp_buf, nccl, data_parallel_options(cfg.parallel), cfg.optim);
  ASSERT_GT(dp.report().bucket_count, 2);
  const std::vector<double> got = train(dp, dp_model);
  for (int s = 0; s < steps; ++s) EXPECT_NEAR(got[s], want[s], 1e-3 * want[s]) << "step " << s + 1;
  EXPECT_LT(got.back(), got.front()) << "the run should learn";

  ASSERT_EQ(cudaStreamSynchronize(nccl->comm_stream()), cudaSuccess);
  const comm::CommStats st = nccl->stats();
  // One all-reduce per bucket and step, plus the loss (the initial broadcast
  // is a broadcast).
  EXPECT_EQ(st.by_op.at("all_reduce").count, static_cast<uint64_t>(steps * (dp.report().bucket_count + 1)));
  const StepCommStats& last = (*dp.report().last_step);
  EXPECT_EQ(last.bucket_seconds.size(), static_cast<size_t>(dp.report().bucket_count));
  EXPECT_GE(last.comm_seconds, 0.0);
  EXPECT_GE(last.overlap_ratio(), 0.0);
  std::printf("single-rank NCCL DP: %d buckets, last step comm %.3f ms, exposed %.3f ms, overlap %.2f\n",
              dp.report().bucket_count, last.comm_seconds * 1e3, last.exposed_seconds * 1e3, last.overlap_ratio());
}
#else
TEST(GpuTraining, SingleRankNcclDataParallelPath) { GTEST_SKIP() << "weft was built without CUDA and NCCL"; }
#endif

}  // namespace
}  // namespace weft::gpu_test
