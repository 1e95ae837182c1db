// weft-worker: one training process (one rank).
// Exit codes are the contract with weft-run and the operator:
//   0 done, 1 bad config or input, 2 internal error, 3 peer lost or collective
//   timeout, 4 checkpoint I/O, 130 SIGINT / 143 SIGTERM after a checkpoint
//   (or, before training started, at once: there is nothing to save).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <filesystem>
#include <unistd.h>
#include <iostream>

#include "comm/process_groups.h"
#include "comm/rendezvous_refusal.h"
#include "config/config.h"
#include "comm/tcp_store.h"
#include "metrics/metrics_port.h"
#include "metrics_server.h"
#include "metrics/train_metrics.h"
#include "train/checkpoint.h"
#include "train/comm_options.h"
#include "train/content_identity.h"
#include "train/device.h"
#include "train/memory_estimate.h"
#include "train/output_dirs.h"
#include "train/trainer.h"

namespace {

std::atomic<int> g_stop_signal{0};  // written by the signal handler only

// The first signal is the one the exit code tells: a rank stopping for a
// SIGINT that then gets the launcher's SIGTERM (sent once another rank has
// exited) still exits 130. Lock-free, so safe in a handler.
void on_signal(int sig) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
}

// The exit code of a stop by `sig` (async-signal-safe).
int stop_exit_code(int sig) {
  return sig == SIGINT ? weft::contract::kExitInterrupted : weft::contract::kExitPreempted;
}

// Before training starts there is nothing to save, and a rank may block for
// the whole rendezvous timeout in DNS, connect or the store's wait, or spend
// minutes building a large model or loading its checkpoint or init_from
// weights: a signal then ends the process at once.
void on_signal_before_training(int sig) {
  const char msg[] =
      "weft-worker: stopped by a signal while joining the job, building the model or loading its weights; "
      "nothing to save\n";
  ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
  ::_exit(stop_exit_code(sig));
}

// A rank that failed on its own is on its way out with its reason: leaving
// the job closes its connections, its peers exit 3 at once, and the launcher
// (weft-run, the kubelet) answers with SIGTERM. Ignored from here, so the
// exit code stays this rank's reason, not the 143 of a stop.
int exit_with_own_reason(int code) {
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  return code;
}

// A rank's last words before an early exit, on stderr: the signals ignored
// first (exit_with_own_reason), then the whole line in one write(2). Every
// rank of a gang given the same bad config fails at once; weft-run answers
// the first failure with SIGTERM to the others, and a line written piece by
// piece (std::cerr is unbuffered) was cut after "bad config: " when that
// signal came between two pieces.
// A failing rank's reason also goes to $WEFT_TERMINATION_LOG, the pod's
// termination message, which the operator's Failed condition quotes: what the
// rank logs after it (telling the gang through the store, waiting for the
// others to hear) must not take its place there, as it would in the log's
// last line.
void write_termination_reason(const std::string& line) {
  const char* path = std::getenv(weft::contract::kEnvTerminationLog);
  if (path == nullptr || *path == '\0') return;
  std::ofstream out(path, std::ios::trunc);
  out << line << (line.empty() || line.back() != '\n' ? "\n" : "");
}

int exit_saying(int code, const std::string& prefix, const std::exception& e) {
  exit_with_own_reason(code);
  const std::string text = prefix + e.what() + "\n";
  write_termination_reason(text);
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return code;
}

// OpenMP's worker threads spin while they wait for work, and so do
// OpenBLAS's own threads: on a node whose cores are all in use the spinners
// steal the cores the other pool needs (tiny preset, 2 cores: 7.1k tok/s
// spinning, 15.7k passive). libgomp reads OMP_WAIT_POLICY when it loads, so
// set it and re-execute before anything else runs, unless the user chose.
void ensure_passive_openmp_waits(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);  // on failure, carry on with the default policy
}

// Rank 0's final progress for the operator (contract: kProgressLinePrefix),
// to $WEFT_TERMINATION_LOG when set; `why` (a stop) follows on a line of its
// own, so the termination message still ends with what happened. A file that
// cannot be written costs the final progress only.
void write_final_progress(const weft::TrainSummary& s, const std::string& why) {
  const char* path = std::getenv(weft::contract::kEnvTerminationLog);
  if (path == nullptr || *path == '\0') return;
  // nlohmann writes a non-finite number (a diverged loss) as null.
  nlohmann::json progress = {{"step", s.steps_done},
                             {"loss", s.final_loss},
                             {"tokensPerSecond", s.tokens_per_second},
                             {"overlapRatio", s.overlap_ratio()}};
  if (!s.eval_losses.empty()) progress["evalLoss"] = s.eval_losses.back();
  std::ofstream out(path, std::ios::trunc);
  out << weft::contract::kProgressLinePrefix << progress.dump() << "\n";
  if (!why.empty()) out << why << "\n";
  if (!out.flush()) spdlog::warn("cannot write the final progress to {} ({})", path, weft::contract::kEnvTerminationLog);
}

// --eval and --export-hf: a stop is looked at before every tensor of a
// checkpoint's assembly (and every held-out batch); should a phase between
// them (verifying the checkpoint, loading the weights, building the model)
// outlast kStopBound, this thread removes the scratch directories itself and
// ends the process, so a SIGTERM is answered within that bound and leaves
// nothing half-written behind.
constexpr auto kStopBound = std::chrono::seconds(5);

class StopWatchdog {
 public:
  StopWatchdog(std::string what, std::vector<std::filesystem::path> scratch)
      : what_(std::move(what)), scratch_(std::move(scratch)), thread_([this] { watch(); }) {}
  ~StopWatchdog() {
    done_.store(true);
    thread_.join();
  }

 private:
  void watch() {
    using Clock = std::chrono::steady_clock;
    std::optional<Clock::time_point> since;
    while (!done_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (g_stop_signal.load() == 0) continue;
      if (!since) since = Clock::now();
      if (Clock::now() - *since < kStopBound) continue;
      for (const auto& p : scratch_) {
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
      }
      const std::string msg = "weft-worker: " + what_ + ": stopped by a signal before it finished; nothing written\n";
      ssize_t ignored = ::write(STDERR_FILENO, msg.data(), msg.size());
      (void)ignored;
      ::_exit(stop_exit_code(g_stop_signal.load()));
    }
  }

  const std::string what_;
  const std::vector<std::filesystem::path> scratch_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// weft-worker --export-hf CKPT OUT: SIGINT / SIGTERM end it with 130 / 143
// and nothing at OUT (export_hf writes OUT.tmp-PID and renames it at the end).
int run_export(const std::string& checkpoint, const std::string& out) {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  StopWatchdog watch("--export-hf", {std::filesystem::path(out + fmt::format(".tmp-{}", ::getpid()))});
  try {
    spdlog::info("exporting {} to {}", checkpoint, out);
    const std::string from = weft::export_hf(checkpoint, out, &g_stop_signal);
    spdlog::info("exported {} to {} (Hugging Face model directory, f32)", from, out);
    return weft::contract::kExitDone;
  } catch (const weft::StopRequested& e) {
    std::cerr << "weft-worker: --export-hf: " << e.what() << "; nothing written to " << out << "\n";
    return stop_exit_code(g_stop_signal.load());
  } catch (const weft::CheckpointError& e) {  // unreadable or damaged, or OUT not writable
    return exit_saying(weft::contract::kExitCheckpointIo, "weft-worker: --export-hf: ", e);
  } catch (const std::exception& e) {  // the checkpoint's config
    return exit_saying(weft::contract::kExitBadConfig, "weft-worker: --export-hf: ", e);
  }
}

// --eval's config: the file's or the preset's, on one rank, every eval.* rule
// applied, the model directory's shape.
weft::WorkerConfig eval_config(const std::string& config_path, const std::string& preset,
                               const std::string& model_dir) {
  weft::WorkerConfig cfg = !config_path.empty()
                               ? weft::load_config_file(config_path, model_dir)
                               : weft::parse_config("preset: " + preset + "\n", "--preset", model_dir);
  weft::apply_env_overrides(cfg, weft::comm::current_environment());
  cfg.checkpoint.resume = false;
  cfg.parallel = weft::ParallelConfig{};  // one rank: the checkpoint's layout does not matter
  weft::validate_for_eval(cfg);
  weft::resolve(cfg);
  if (cfg.device == weft::ComputeDevice::Cuda)
    weft::place_rank(cfg, weft::contract::LaunchEnv{}, weft::comm::current_environment());
  return cfg;
}

// --eval's scratch for a checkpoint's assembled model: beside the checkpoint
// (DIR/.weft-eval-PID for a checkpoint directory with `latest`, else in the
// step directory's parent), where whoever looks at the checkpoint sees it,
// or the temp directory when that is not writable. Held (HeldScratch) while
// the eval runs, so the next --eval there removes what a killed one left
// (the temp directory's too, where scratch went before).
std::unique_ptr<weft::HeldScratch> hold_eval_scratch(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d = fs::path(dir).filename().empty() ? fs::path(dir).parent_path() : fs::path(dir);
  const fs::path beside = fs::exists(d / "latest") ? d : (d.parent_path().empty() ? fs::path(".") : d.parent_path());
  const std::string name = fmt::format(".weft-eval-{}", ::getpid());
  for (const auto& [parent, prefix] : {std::pair{beside, std::string(".weft-eval-")},
                                       std::pair{fs::temp_directory_path(), std::string(".weft-eval-")},
                                       std::pair{fs::temp_directory_path(), std::string("weft-eval-")}}) {
    const weft::StaleTemporaries stale = weft::remove_abandoned_scratch(parent.string(), prefix);
    if (stale.removed > 0)
      spdlog::info("removed {} leftovers of interrupted evals from {} ({:.1f} MiB)", stale.removed,
                   parent.string(), stale.bytes / 1048576.0);
  }
  try {
    return std::make_unique<weft::HeldScratch>((beside / name).string());
  } catch (const weft::CheckpointError& e) {
    spdlog::info("cannot assemble beside the checkpoint ({}); using {}", e.what(),
                 fs::temp_directory_path().string());
    return std::make_unique<weft::HeldScratch>((fs::temp_directory_path() / name).string());
  }
}

// weft-worker --eval DIR: one rank, the config's held-out data, the model of
// DIR; a weft checkpoint is exported to a Hugging Face directory first (a
// sharded one is assembled from its rank files, into hold_eval_scratch's
// directory). Prints the loss and a JSON line ("eval {...}") for scripts.
// Every eval.* rule applies, whatever eval.every says. SIGINT / SIGTERM end
// it with 130 / 143 and remove the assembled copy.
int run_eval(const std::string& config_path, const std::string& preset, const std::string& dir) {
  namespace fs = std::filesystem;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::string model_dir = dir;
  const bool checkpoint = fs::exists(fs::path(dir) / "meta.json") || fs::exists(fs::path(dir) / "latest");
  std::unique_ptr<weft::HeldScratch> scratch;
  try {
    if (checkpoint) scratch = hold_eval_scratch(dir);
  } catch (const weft::CheckpointError& e) {
    return exit_saying(weft::contract::kExitCheckpointIo, "weft-worker: --eval: ", e);
  }
  const std::vector<fs::path> scratch_paths =
      scratch ? std::vector<fs::path>{scratch->path()} : std::vector<fs::path>{};
  struct Cleanup {
    std::vector<fs::path> paths;
    ~Cleanup() {
      for (const auto& p : paths) {
        std::error_code ec;
        fs::remove_all(p, ec);
      }
    }
  } cleanup{scratch_paths};
  StopWatchdog watch("--eval", scratch_paths);
  try {
    if (checkpoint) {
      const std::string exported = (fs::path(scratch->path()) / "model").string();
      spdlog::info("assembling the model of checkpoint {} in {}", dir, exported);
      weft::export_hf(dir, exported, &g_stop_signal);
      model_dir = exported;
    }
    const weft::WorkerConfig cfg = eval_config(config_path, preset, model_dir);
    weft::Trainer trainer(cfg);
    spdlog::info("evaluating {} held-out batches of {} x {} tokens", cfg.eval.batches, cfg.train.micro_batch,
                 cfg.train.seq_len);
    const weft::EvalResult r = trainer.evaluate_hf(model_dir, &g_stop_signal);
    if (r.stopped) {
      std::cerr << "weft-worker: --eval: stopped by signal " << g_stop_signal.load() << " after " << r.seconds
                << " s of evaluation; no loss\n";
      return stop_exit_code(g_stop_signal.load());
    }
    spdlog::info("eval of {}: held-out loss {:.6f} over {} batches ({} tokens), {:.2f} s", dir, r.loss, r.batches,
                 r.tokens, r.seconds);
    const nlohmann::json j = {{"loss", r.loss}, {"batches", r.batches}, {"tokens", r.tokens}, {"model", dir}};
    std::cout << "eval " << j.dump() << std::endl;
    return weft::contract::kExitDone;
  } catch (const weft::StopRequested& e) {
    std::cerr << "weft-worker: --eval: " << e.what() << "\n";
    return stop_exit_code(g_stop_signal.load());
  } catch (const weft::ConfigError& e) {
    return exit_saying(weft::contract::kExitBadConfig, "weft-worker: --eval: bad config: ", e);
  } catch (const weft::DataError& e) {
    return exit_saying(weft::contract::kExitBadConfig, "weft-worker: --eval: bad data: ", e);
  } catch (const weft::CheckpointError& e) {  // an unreadable or damaged checkpoint
    return exit_saying(weft::contract::kExitCheckpointIo, "weft-worker: --eval: ", e);
  } catch (const std::exception& e) {  // a bad model directory
    return exit_saying(weft::contract::kExitBadConfig, "weft-worker: --eval: ", e);
  }
}

// The run fingerprint (comm/run_fingerprint.h): every setting but the
// per-rank ones, the launch facts every rank must share, and what the files
// init_from and the shard globs name hold on this rank.
weft::comm::Settings run_settings(const weft::WorkerConfig& cfg, const weft::contract::LaunchEnv& launch) {
  // The launch facts first: the first difference is the one named, and a
  // planned world that differs also changes train.grad_accum (scaled to it),
  // which would otherwise be named instead of its cause.
  weft::comm::Settings s;
  s.emplace_back(weft::contract::kEnvWorldSize, std::to_string(launch.world));
  s.emplace_back(weft::contract::kEnvPlannedWorldSize, std::to_string(launch.planned()));
  for (auto& entry : weft::shared_settings(cfg)) s.push_back(std::move(entry));
  for (auto& entry : weft::content_identity(cfg)) s.push_back(std::move(entry));
  return s;
}

// ---- main's steps: each either returns what the next needs or throws ExitNow
// with the process's exit code (its reason already printed).

struct ExitNow {
  int code;
  std::string reason = "";  // a refusal before the rendezvous: what the other ranks are told
};

using Env = std::map<std::string, std::string>;  // the process environment (comm::current_environment)

struct WorkerArgs {
  std::string config_path, preset = "tiny", out_dir, checkpoint_dir, init_from, eval_dir;
  int steps = 0;
  bool no_resume = false, print_config = false;
  std::vector<std::string> export_hf;  // CKPT OUT
};

WorkerArgs parse_args(int argc, char** argv) {
  CLI::App app{"weft-worker: trains a Llama-style model (one rank)"};
  WorkerArgs a;
  app.add_option("config", a.config_path, "worker config YAML (default: the --preset)");
  app.add_option("--preset", a.preset, "built-in config when no file is given: tiny, gpt2-124m");
  app.add_option("--steps", a.steps, "override train.steps")->check(CLI::PositiveNumber);
  app.add_option("--out", a.out_dir, "override train.out_dir (summary.json, default checkpoints)");
  app.add_option("--checkpoint-dir", a.checkpoint_dir, "override checkpoint.dir");
  app.add_option("--init-from", a.init_from,
                 "start from a Hugging Face Llama directory (overrides init_from; the model section "
                 "comes from its config.json)");
  app.add_flag("--no-resume", a.no_resume, "start from scratch even if a checkpoint exists");
  app.add_flag("--print-config", a.print_config, "print the resolved config and exit");
  app.add_option("--export-hf", a.export_hf,
                 "write the Hugging Face model directory OUT of checkpoint CKPT (a step-N directory, or a "
                 "checkpoint directory's latest) and exit; sharded checkpoints stream tensor by tensor")
      ->expected(2)
      ->type_name("CKPT OUT");
  app.add_option("--eval", a.eval_dir,
                 "evaluate the model of DIR (a Hugging Face Llama directory, a checkpoint's step-N directory, "
                 "sharded ones included, or a checkpoint directory's latest) on the config's held-out data "
                 "(eval.batches, eval.shards), print its loss and exit")
      ->type_name("DIR");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; a usage error is bad input like any other (exit 1).
    throw ExitNow{app.exit(e) == 0 ? weft::contract::kExitDone : weft::contract::kExitBadConfig};
  }
  if (!a.export_hf.empty() && !a.eval_dir.empty()) {
    // Each is a whole job of its own: doing one and dropping the other
    // without a word was the old behaviour.
    std::cerr << "weft-worker: --eval and --export-hf: give one of them per call (export first, then --eval the "
                 "exported directory or the checkpoint itself)\n";
    throw ExitNow{weft::contract::kExitBadConfig};
  }
  return a;
}

// The config file or preset, the environment's WEFT_* overrides, the flags,
// validated.
weft::WorkerConfig load_config(const WorkerArgs& a, const Env& env) {
  try {
    weft::WorkerConfig cfg;
    if (!a.config_path.empty())
      cfg = weft::load_config_file(a.config_path, a.init_from);
    else if (!a.init_from.empty())  // the preset's model fields give way to config.json's
      cfg = weft::parse_config("preset: " + a.preset + "\n", "--preset", a.init_from);
    else
      cfg = weft::preset(a.preset);
    weft::apply_env_overrides(cfg, env);
    if (a.steps > 0) cfg.train.steps = a.steps;
    if (!a.out_dir.empty()) cfg.train.out_dir = a.out_dir;
    if (!a.checkpoint_dir.empty()) cfg.checkpoint.dir = a.checkpoint_dir;
    if (a.no_resume) cfg.checkpoint.resume = false;
    weft::validate(cfg);
    // Every auto the config can decide is decided here, once: what
    // --print-config shows is what the rank runs.
    weft::resolve(cfg);
    return cfg;
  } catch (const weft::ConfigError& e) {
    throw ExitNow{exit_saying(weft::contract::kExitBadConfig, "weft-worker: bad config: ", e),
                  std::string("bad config: ") + e.what()};
  }
}

// RANK, WORLD_SIZE, ... and, for an elastic gang smaller than planned, the
// gradient accumulation that keeps every step's samples those of the plan.
weft::contract::LaunchEnv read_launch(weft::WorkerConfig& cfg, const Env& env) {
  try {
    const weft::contract::LaunchEnv launch = weft::contract::parse_launch_env(env);
    const int planned_accum = weft::scale_to_planned_world(cfg, launch.world, launch.planned());
    if (planned_accum != cfg.train.grad_accum)
      spdlog::info("elastic: {} of the {} planned ranks; train.grad_accum {} -> {}, so that every step trains on "
                   "the samples of the planned gang",
                   launch.world, launch.planned(), planned_accum, cfg.train.grad_accum);
    return launch;
  } catch (const weft::contract::LaunchEnvError& e) {
    throw ExitNow{exit_saying(weft::contract::kExitBadConfig, "weft-worker: bad launch environment: ", e),
                  std::string("bad launch environment: ") + e.what()};
  } catch (const weft::ConfigError& e) {
    throw ExitNow{exit_saying(weft::contract::kExitBadConfig, "weft-worker: bad launch environment: ", e),
                  std::string("bad launch environment: ") + e.what()};
  }
}

// --print-config: the config as the rank runs it, the fingerprint the ranks
// compare at the rendezvous (equal on every rank of a job, whatever its
// per-rank settings) and the memory estimate.
void print_config(const weft::WorkerConfig& cfg, const weft::contract::LaunchEnv& launch) {
  std::cout << weft::to_yaml(cfg)
            << fmt::format("# run fingerprint: {:016x}\n", weft::comm::settings_fingerprint(run_settings(cfg, launch)))
            << "# memory estimate per rank: " << weft::estimate_memory(cfg, launch.world).describe() << "\n";
}

// The GPU is chosen before the communicators exist (NCCL binds to it), and a
// model that cannot fit is refused before anything is allocated.
void place_on_device(const weft::WorkerConfig& cfg, const weft::contract::LaunchEnv& launch,
                     const Env& env) {
  try {
    const weft::DevicePlacement placed = weft::place_rank(cfg, launch, env);
    // What the device holds before weft allocates (the CUDA context, other
    // processes), and below after the communicators: the memory outside
    // weft's allocator, told apart step by step.
    if (placed.gpu >= 0)
      spdlog::info("device: {}; {:.0f} MiB of it in use", placed.describe(), weft::gpu_mib_in_use());
    weft::check_memory_fits(cfg, env, launch);
  } catch (const weft::ConfigError& e) {
    throw ExitNow{exit_saying(weft::contract::kExitBadConfig, "weft-worker: ", e), e.what()};
  }
}

// A refusing rank ends at once on a signal, with its own reason's code.
void on_signal_while_refusing(int) { ::_exit(weft::contract::kExitBadConfig); }

// A rank that refuses before the rendezvous says why where its peers wait
// (comm/rendezvous_refusal.h): they exit 1 naming it, within seconds, instead
// of waiting out the rendezvous timeout and exiting 3. A rank 0 keeps its
// store up until every rank has heard, at most `budget`.
void tell_the_gang(const Env& env, const std::string& reason, std::chrono::milliseconds budget) {
  const weft::comm::RefusalContact contact = weft::comm::refusal_contact(env);
  if (!contact.reachable() || reason.empty()) return;
  std::signal(SIGINT, on_signal_while_refusing);
  std::signal(SIGTERM, on_signal_while_refusing);
  spdlog::info("telling the other ranks why {} refuses to join", contact.who);
  spdlog::info("{}", weft::comm::announce_refusal(contact, reason, budget));
}

// The rendezvous: every rank's communicators, or the reason there are none.
std::unique_ptr<weft::comm::ProcessGroups> join_job(const weft::WorkerConfig& cfg,
                                                    const weft::contract::LaunchEnv& launch) {
  try {
    weft::comm::GroupOptions options = weft::group_options(cfg);
    options.shared_settings = run_settings(cfg, launch);
    auto groups = weft::comm::init_process_groups(launch, options);
    if (cfg.device == weft::ComputeDevice::Cuda)
      spdlog::info("GPU memory with the communicators: {:.0f} MiB of the device in use", weft::gpu_mib_in_use());
    return groups;
  } catch (const weft::comm::SettingsMismatchError& e) {
    // Every rank refuses at once: one write, so weft-run forwards whole lines.
    throw ExitNow{exit_saying(weft::comm::kExitBadConfig, "weft-worker: bad config: ", e)};
  } catch (const weft::comm::TokenRejectedError& e) {
    throw ExitNow{exit_saying(weft::comm::kExitBadConfig, "weft-worker: rendezvous refused: ", e)};
  } catch (const weft::comm::RankRefusedError& e) {
    // A rank of the gang (this one, or one that told the store) will not join.
    throw ExitNow{exit_saying(weft::comm::kExitBadConfig, "weft-worker: ", e)};
  } catch (const weft::comm::RendezvousError& e) {
    throw ExitNow{exit_saying(weft::comm::kExitPeerLost, "weft-worker: rendezvous failed: ", e)};
  } catch (const weft::comm::CommError& e) {
    throw ExitNow{exit_saying(weft::comm::kExitBadConfig, "weft-worker: bad launch environment: ", e)};
  }
}

// Where the run writes is checked now, not at its first checkpoint. Rank 0
// writes the summary and checkpoints (ZeRO and ISP ranks their shards too)
// and holds both directories (DirLock) for the run: a second run started into
// them is refused, naming this one, instead of the two removing each other's
// staging. A TrainingJob's rank waits a while for the lock, which its own
// previous attempt may still hold while it writes its last checkpoint. The
// gang has formed, so no writer of this job is running and what interrupted
// writes left behind can go.
struct Outputs {
  bool writes_checkpoints = false;
  std::vector<std::unique_ptr<weft::DirLock>> held;  // rank 0's
};

Outputs prepare_outputs(const weft::WorkerConfig& cfg, const weft::contract::LaunchEnv& launch, int rank) {
  Outputs o;
  const std::string ckpt_dir = weft::checkpoint_dir(cfg);
  o.writes_checkpoints = rank == 0 || weft::strategy_traits(cfg.parallel).every_rank_writes;
  if (rank == 0) weft::require_writable_dir(cfg.train.out_dir, "train.out_dir");
  if (o.writes_checkpoints) weft::require_writable_dir(ckpt_dir, "checkpoint.dir");
  if (rank == 0) {
    const std::string me = weft::lock_holder_text(
        launch.job_uid.empty() ? "" : fmt::format("TrainingJob uid {} attempt {}", launch.job_uid, launch.attempt));
    const auto wait = launch.job_uid.empty() ? std::chrono::milliseconds(0) : std::chrono::milliseconds(60000);
    try {
      o.held.push_back(std::make_unique<weft::DirLock>(cfg.train.out_dir, "train.out_dir", me, wait));
      std::error_code ec;
      if (cfg.checkpoint.save && !std::filesystem::equivalent(ckpt_dir, cfg.train.out_dir, ec))
        o.held.push_back(std::make_unique<weft::DirLock>(ckpt_dir, "checkpoint.dir", me, wait));
    } catch (const weft::DirLockHeld& e) {
      throw weft::ConfigError(e.what());
    }
    // A run that writes no checkpoint (checkpoint.save false) neither holds
    // checkpoint.dir nor cleans it: another run may be writing there.
    if (cfg.checkpoint.save) {
      const weft::StaleTemporaries stale = weft::remove_stale_temporaries(ckpt_dir);
      if (stale.removed > 0)
        spdlog::info("removed {} leftovers of interrupted checkpoint writes from {}, {:.1f} MiB freed",
                     stale.removed, ckpt_dir, stale.bytes / 1048576.0);
    }
  }
  return o;
}

// The trainer's groups: dp, or for a strategy on the rank grid the whole
// world (every rank agrees on stops at the step boundary) and sp, wp, wdp.
weft::TrainerComm trainer_comm(const weft::WorkerConfig& cfg, weft::comm::ProcessGroups& groups) {
  weft::TrainerComm tc;
  tc.rank = groups.rank();
  tc.world = groups.world_size();
  tc.dp = groups.dp;
  tc.context = &groups.context();
  if (weft::strategy_traits(cfg.parallel).grid_groups) {
    tc.dp = groups.world;
    tc.sp = groups.sp;
    tc.wp = groups.wp;
    tc.wdp = groups.wdp;
  }
  return tc;
}

// A resumed run needs room only for the checkpoints of the steps it has left.
void require_checkpoint_space(const weft::WorkerConfig& cfg, weft::Trainer& trainer) {
  const std::string ckpt_dir = weft::checkpoint_dir(cfg);
  const std::vector<std::string> existing = weft::list_checkpoints(ckpt_dir);
  const int64_t start = cfg.checkpoint.resume ? weft::newest_checkpoint_step(ckpt_dir) : 0;
  weft::require_free_space(ckpt_dir, weft::checkpoint_bytes_estimate(trainer.model().num_params()),
                           cfg.checkpoint.keep, static_cast<int>(existing.size()),
                           weft::checkpoints_to_write(start, cfg.train.steps, cfg.checkpoint.every),
                           "checkpoint.dir");
}

// What the rank is doing, for /ready: main sets each phase as it starts it,
// from before the rendezvous on; once the trainer's metrics are attached,
// ready means a step finished. Read on the metrics server's thread.
class RankPhase {
 public:
  explicit RankPhase(int rank) : rank_(rank) {}
  void set(std::string what) {
    std::lock_guard lock(mu_);
    what_ = std::move(what);
  }
  // While `m` lives (run_rank attaches and detaches it).
  void attach(const weft::TrainMetrics* m) { metrics_.store(m); }
  bool ready(std::string* why) const {
    const weft::TrainMetrics* m = metrics_.load();
    const int64_t step = m != nullptr ? m->last_step() : 0;
    if (step > 0) {
      *why = fmt::format("rank {} trains: step {} done", rank_, step);
      return true;
    }
    std::lock_guard lock(mu_);
    *why = fmt::format("rank {} is not training yet: {}", rank_, what_);
    return false;
  }

 private:
  const int rank_;
  mutable std::mutex mu_;
  std::string what_ = "starting";
  std::atomic<const weft::TrainMetrics*> metrics_{nullptr};
};

// /metrics and /ready of this rank, served from before the rendezvous (a rank
// that waits there answers /ready with what it waits for; /metrics holds
// weft_rank_info, so a scraper already knows whose port it is) until the
// process ends. A busy port costs a plain run its metrics, never its
// training; in a TrainingJob the operator's progress, tuning and stragglers
// read this port, so whatever holds it would be read as this rank: the rank
// refuses to train.
std::unique_ptr<weft::MetricsServer> serve_metrics(const weft::WorkerConfig& cfg,
                                                   const weft::contract::LaunchEnv& launch,
                                                   std::shared_ptr<prometheus::Registry> registry,
                                                   const RankPhase& phase) {
  const weft::MetricsEndpoint ep = weft::metrics_endpoint(cfg.metrics, launch.local_rank);
  if (!ep.problem.empty()) spdlog::warn("metrics disabled: {}", ep.problem);
  if (ep.port <= 0) return nullptr;
  // A pod (or a local cluster's pod) with its own address serves there, so
  // several ranks on one machine do not claim the same 0.0.0.0 port.
  const std::string host = launch.bind_addr.empty() ? "0.0.0.0" : launch.bind_addr;
  weft::MetricsServerOptions server_opt;
  server_opt.ready = [&phase](std::string* why) { return phase.ready(why); };
  try {
    weft::register_rank_info(*registry, launch.job_uid, launch.attempt, launch.rank, launch.node_rank,
                             launch.local_rank);
    auto exposer = std::make_unique<weft::MetricsServer>(std::move(registry), host, ep.port, server_opt);
    spdlog::info("metrics at http://{}:{}/metrics (readiness at /ready)", host, ep.port);
    return exposer;
  } catch (const std::exception& e) {
    if (!launch.job_uid.empty()) {
      const std::string why = fmt::format(
          "metrics port {} is taken ({}): a TrainingJob's rank does not train unseen; free the port or move the "
          "job's metrics (spec.worker.metrics.port)",
          ep.port, e.what());
      spdlog::error("{}", why);
      throw ExitNow{exit_with_own_reason(weft::contract::kExitBadConfig), why};
    }
    spdlog::warn("metrics disabled: cannot serve on port {} ({}); training continues", ep.port, e.what());
    return nullptr;
  }
}

// Trains; once the ranks agree where they start, a signal asks for a
// checkpoint at the next step all ranks agree on. Rank 0 leaves its final
// progress for the operator; a finished run serves its metrics until the
// scraper's next scrape (a signal ends the wait) so the last step reaches
// the dashboard.
int train(weft::Trainer& trainer, const weft::WorkerConfig& cfg, const weft::contract::LaunchEnv& launch, int rank,
          bool serving_metrics) {
  weft::TrainSummary s = trainer.run(&g_stop_signal, [] {
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
  });
  if (s.stopped_early) {
    const int sig = g_stop_signal.load();
    const std::string why =
        sig != 0 ? fmt::format("stopped by signal {} at step {}; checkpoint {}", sig, s.steps_done, s.last_checkpoint)
                 // the ranks agreed to stop because another rank was signalled
                 : fmt::format("stopped at step {} because another rank was asked to stop; checkpoint {}",
                               s.steps_done, s.last_checkpoint);
    spdlog::warn("{}", why);
    if (rank == 0) write_final_progress(s, why);
    return stop_exit_code(sig);
  }
  if (rank == 0) write_final_progress(s, "");
  const double linger = weft::metrics_linger_seconds(cfg.metrics, !launch.job_uid.empty());
  if (serving_metrics && linger > 0) {
    spdlog::info("training done; metrics served {} s more (metrics.linger_seconds)", linger);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(linger);
    while (g_stop_signal.load() == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return weft::contract::kExitDone;
}

// The rank, from the joined job to its exit code. `registry` is the one the
// metrics server serves (already holding weft_rank_info).
int run_rank(const weft::WorkerConfig& cfg, const weft::contract::LaunchEnv& launch,
             weft::comm::ProcessGroups& groups, std::shared_ptr<prometheus::Registry> registry, RankPhase& phase,
             bool serving_metrics) {
  const int rank = groups.rank();
  const Outputs outputs = prepare_outputs(cfg, launch, rank);
  const bool writes_checkpoints = outputs.writes_checkpoints;
  const weft::TrainerComm tc = trainer_comm(cfg, groups);
  phase.set("joined the rendezvous; building the model and loading its weights or checkpoint");
  spdlog::info("building the model (memory estimate per rank {})",
               weft::format_bytes(weft::estimate_memory(cfg, tc.world).total()));
  weft::Trainer trainer(cfg, tc);
  if (writes_checkpoints) require_checkpoint_space(cfg, trainer);
  std::vector<weft::comm::CommunicatorPtr> metric_groups{groups.world, groups.dp};
  if (weft::strategy_traits(cfg.parallel).grid_groups)
    metric_groups.insert(metric_groups.end(), {groups.sp, groups.wp, groups.wdp});
  weft::TrainMetrics metrics(cfg, rank, groups.world_size(), metric_groups, std::move(registry));
  trainer.set_observer(&metrics);
  metrics.set_bucket_cap_mb(trainer.grad_sync().report().bucket_cap_mb);
  metrics.set_attention_kernel(trainer.attention_kernel().name);
  // train.attention picks among GPU kernels: on the CPU it changes nothing,
  // which a user who set it should hear once rather than guess.
  if (cfg.device == weft::ComputeDevice::Cpu && cfg.train.attention != weft::contract::Attention::Auto && rank == 0)
    spdlog::warn("train.attention: {} chooses among GPU attention kernels; on the CPU attention runs weft's CPU "
                 "kernel (the setting has no effect here)",
                 weft::contract::mode_name(cfg.train.attention));
  phase.set("training; no step finished yet");
  phase.attach(&metrics);
  struct Detach {
    RankPhase& p;
    ~Detach() { p.attach(nullptr); }
  } detach{phase};
  return train(trainer, cfg, launch, rank, serving_metrics);
}

// A rank that failed on its own: its reason, and the exit code it means.
// Signals are ignored before the reason is printed: a launcher's SIGTERM
// would otherwise end the rank before it said why.
int exit_for_failure() {
  auto fail = [](int code, const std::string& line) {
    exit_with_own_reason(code);
    spdlog::error("{}", line);
    write_termination_reason(line);
    return code;
  };
  try {
    throw;
  } catch (const weft::ConfigError& e) {
    return fail(weft::contract::kExitBadConfig, std::string("bad config: ") + e.what());
  } catch (const weft::DataError& e) {
    return fail(weft::contract::kExitBadConfig, std::string("bad data: ") + e.what());
  } catch (const weft::CheckpointError& e) {
    return fail(weft::contract::kExitCheckpointIo, std::string("checkpoint: ") + e.what());
  } catch (const weft::DivergedError& e) {
    return fail(weft::contract::kExitDiverged, std::string("diverged: ") + e.what());
  } catch (const std::exception& e) {
    return fail(weft::contract::kExitInternal, e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  ensure_passive_openmp_waits(argv);
  // From the first instruction after the re-exec: a SIGTERM while the config
  // is read ends the process with 143 like any stop before training, not by
  // the default action (killed by signal 15, no exit code of the contract).
  std::signal(SIGINT, on_signal_before_training);
  std::signal(SIGTERM, on_signal_before_training);
  // A launcher that blocks these for itself may pass the mask on: unblocked,
  // a stop sent while the loader ran is answered now, by the handler.
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  ::sigprocmask(SIG_UNBLOCK, &stops, nullptr);
  try {
    const WorkerArgs args = parse_args(argc, argv);
    spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    if (!args.export_hf.empty()) return run_export(args.export_hf[0], args.export_hf[1]);
    if (!args.eval_dir.empty()) return run_eval(args.config_path, args.preset, args.eval_dir);
    // The process environment, read once: config overrides (WEFT_*) and the
    // launch environment (RANK, WORLD_SIZE, LOCAL_RANK, ...) both come from it.
    const auto env = weft::comm::current_environment();
    weft::WorkerConfig cfg;
    weft::contract::LaunchEnv launch;
    std::chrono::milliseconds refusal_budget = weft::comm::kRefusalBudget;
    // /metrics and /ready are served from the launch environment on: /ready
    // tells what the rank waits for.
    std::unique_ptr<RankPhase> phase;
    auto registry = std::make_shared<prometheus::Registry>();
    std::unique_ptr<weft::MetricsServer> exposer;
    try {
      cfg = load_config(args, env);
      refusal_budget = std::min(refusal_budget, std::chrono::milliseconds(static_cast<int64_t>(
                                                    cfg.comm.rendezvous_timeout_s * 1000)));
      launch = read_launch(cfg, env);
      if (args.print_config) {
        print_config(cfg, launch);
        return weft::contract::kExitDone;
      }
      phase = std::make_unique<RankPhase>(launch.rank);
      exposer = serve_metrics(cfg, launch, registry, *phase);
      phase->set("placing the rank on its device");
      place_on_device(cfg, launch, env);
    } catch (const ExitNow& e) {
      if (!args.print_config) tell_the_gang(env, e.reason, refusal_budget);
      throw;
    }
    std::signal(SIGINT, on_signal_before_training);
    std::signal(SIGTERM, on_signal_before_training);
    phase->set(launch.world > 1 ? fmt::format("waiting in the rendezvous at {}:{} for all {} ranks",
                                              launch.master_addr, launch.master_port, launch.world)
                                : std::string("forming its one-rank job"));
    const std::unique_ptr<weft::comm::ProcessGroups> groups = join_job(cfg, launch);
    try {
      return run_rank(cfg, launch, *groups, registry, *phase, exposer != nullptr);
    } catch (const ExitNow&) {
      throw;
    } catch (...) {
      return exit_for_failure();
    }
  } catch (const ExitNow& e) {
    return e.code;
  }
}
