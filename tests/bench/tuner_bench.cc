// Bucket-size tuning benchmark on one machine: runs weft-run -n 2 with a cap
// file and measures steady-state step time, either at one fixed cap
// (--fixed-mb, the offline sweep) or under the operator's own tuning decision (decide_tuning)
// (--tune), which scrapes the two ranks' /metrics and writes each next size
// into the cap file exactly as the operator writes the ConfigMap key.
// Steady state: after the cap is final on both ranks, skip --warmup steps,
// then mean step time over --measure steps from rank 0's weft_step_seconds.
//
// --compare "1,4,25" then measures the same way, in the same job, the final
// cap and each listed cap in turn, --rounds times (the order rotates each
// round), by writing the cap file as the tuner does. Every size is thus timed
// in windows interleaved with the others' in one process, so a drift of the
// machine's load over minutes touches all sizes alike, where separate jobs
// one after another (the plain --fixed-mb sweep) take it as a difference
// between sizes. A cap changed live gives the same buckets as a job started
// with it (BucketCapFile tests); the first steps after a switch are skipped.
// Prints one JSON line. Run through tests/bench/tuning_bench.sh.
#include <CLI/CLI.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "scrape/http_scraper.h"
#include "support/net.h"
#include "tuner/bucket_tuner.h"
#include "tuner/trial_window.h"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

pid_t launch(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
             const std::string& log) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    (void)f;
    ::dup2(STDOUT_FILENO, STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

std::optional<weft::tuner::RankSample> sample(int port) {
  auto r = weft::scrape::scrape({"127.0.0.1", port, "/metrics"}, 3s);
  if (!r.ok()) return std::nullopt;
  return weft::tuner::read_rank_sample(r.metrics);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bucket-size tuning benchmark (2 local ranks)"};
  std::string config, bin_dir = WEFT_BIN_DIR, work = "/tmp/weft-tuner-bench";
  double fixed_mb = 0, min_mb = 0.5, max_mb = 64, start_mb = 25;
  bool tune = false;
  int steps_per_trial = 10, max_trials = 8, warmup = 10, measure = 30, confirm_rounds = 0;
  double deadline_s = 900;
  std::string compare;
  int rounds = 3;
  app.add_option("--config", config, "worker config (YAML)")->required();
  app.add_option("--fixed-mb", fixed_mb, "run at this cap");
  app.add_flag("--tune", tune, "run under the operator's tuning decision");
  app.add_option("--start-mb", start_mb, "the job's own cap (the tuner's start)");
  app.add_option("--min-mb", min_mb);
  app.add_option("--max-mb", max_mb);
  app.add_option("--steps-per-trial", steps_per_trial);
  app.add_option("--max-trials", max_trials);
  app.add_option("--confirm-rounds", confirm_rounds, "rounds of the tuner's final check (spec confirmRounds)");
  app.add_option("--warmup", warmup, "steps skipped once the cap is final");
  app.add_option("--measure", measure, "steps measured");
  app.add_option("--work", work, "scratch directory");
  app.add_option("--deadline", deadline_s, "seconds before giving up");
  app.add_option("--compare", compare, "comma-separated caps (MiB) to time against the final cap, interleaved");
  app.add_option("--rounds", rounds, "rounds of --compare windows");
  CLI11_PARSE(app, argc, argv);
  if (tune == (fixed_mb > 0)) {
    std::cerr << "give exactly one of --tune, --fixed-mb\n";
    return 2;
  }
  std::filesystem::create_directories(work);
  const std::string cap_file = work + "/bucket_cap_mb";
  const double first = tune ? start_mb : fixed_mb;
  std::ofstream(cap_file) << weft::tuner::format_mb(first);
  const int base = weft::testing::free_port_range(2);
  pid_t run = launch({bin_dir + "/weft-run", "-n", "2", "--", config, "--out", work + "/out", "--no-resume"},
                     {{"WEFT_METRICS_PORT", std::to_string(base)},
                      {"WEFT_BUCKET_CAP_FILE", cap_file},
                      {"WEFT_BUCKET_CAP_MB", weft::tuner::format_mb(first)},
                      {"WEFT_STEPS", "1000000"}},
                     work + "/run.log");
  auto stop = [&] {
    ::kill(-run, SIGINT);
    int st = 0;
    ::waitpid(run, &st, 0);
  };
  const auto give_up = Clock::now() + std::chrono::milliseconds(static_cast<long>(deadline_s * 1000));

  // The reconciler's observe step for the two local ranks.
  auto observe = [&] {
    std::vector<weft::tuner::RankObservation> ranks;
    for (int r = 0; r < 2; ++r) {
      weft::scrape::ScrapeResult got = weft::scrape::scrape({"127.0.0.1", base + r, "/metrics"}, 3s);
      weft::tuner::RankObservation o{r, std::nullopt, got.error};
      if (got.ok()) o.sample = weft::tuner::read_rank_sample(got.metrics);
      ranks.push_back(std::move(o));
    }
    return ranks;
  };
  std::optional<weft::tuner::OpenTrial> open;
  weft::tuner::TuneRequest req;
  req.ns = "bench";
  req.name = "tuned";
  req.tuning = {.enabled = true, .min_mb = min_mb, .max_mb = max_mb, .steps_per_trial = steps_per_trial,
                .max_trials = max_trials, .confirm_rounds = confirm_rounds};
  req.start_mb = start_mb;
  req.replicas = 2;
  double final_mb = first;
  nlohmann::json trials = nlohmann::json::array();
  bool final = !tune;
  while (!final) {
    if (Clock::now() > give_up) {
      std::cerr << "tuning did not converge in time\n";
      stop();
      return 1;
    }
    if (weft::tuner::needs_samples(req.status)) req.ranks = observe();
    weft::tuner::TuneDecision r = weft::tuner::decide_tuning(req, open ? &*open : nullptr);
    open = r.open;
    if (r.status) req.status = r.status;
    for (const auto& e : r.events) std::cerr << e.reason << ": " << e.message << "\n";
    if (r.write_mb && *r.write_mb != final_mb) {
      std::ofstream(cap_file + ".tmp") << weft::tuner::format_mb(*r.write_mb);
      std::filesystem::rename(cap_file + ".tmp", cap_file);
      final_mb = *r.write_mb;
    }
    if (req.status && req.status->state == weft::tuning::TuningState::Converged) {
      final = true;
      for (const auto& t : req.status->trials)
        trials.push_back({{"mb", t.bucket_mb}, {"median_step_s", t.median_step_seconds.value_or(0)}});
      break;
    }
    std::this_thread::sleep_for(r.requeue_after.value_or(2s));
  }
  // One measurement window at `mb`: switch (if needed), wait until both
  // ranks report the cap, skip `warmup` steps, then the mean step time and
  // exposed comm over the next `measure` steps (rank 0's counters).
  struct Window {
    double step_s, exposed_s;
    double steps;
  };
  double current_mb = final_mb;
  auto window = [&](double mb) -> std::optional<Window> {
    if (mb != current_mb) {
      std::ofstream(cap_file + ".tmp") << weft::tuner::format_mb(mb);
      std::filesystem::rename(cap_file + ".tmp", cap_file);
      current_mb = mb;
    }
    std::optional<weft::tuner::RankSample> a, b;
    while (Clock::now() < give_up) {
      auto s0 = sample(base), s1 = sample(base + 1);
      if (s0 && s1 && weft::tuner::reports_cap(s0->cap_bytes, mb) && weft::tuner::reports_cap(s1->cap_bytes, mb)) {
        if (!a) {
          a = s0;
        } else if (!b && s0->step >= a->step + warmup) {
          b = s0;
        } else if (b && s0->step >= b->step + measure) {
          const double n = s0->step_seconds_count - b->step_seconds_count;
          return Window{(s0->step_seconds_sum - b->step_seconds_sum) / n,
                        (s0->exposed_seconds - b->exposed_seconds) / n, s0->step - b->step};
        }
      }
      std::this_thread::sleep_for(300ms);
    }
    return std::nullopt;
  };
  auto w = window(final_mb);
  if (!w) {
    std::cerr << "no steady state in time\n";
    stop();
    return 1;
  }
  nlohmann::json out = {{"mode", tune ? "tuned" : "fixed"}, {"bucket_mb", final_mb},
                        {"step_s", w->step_s}, {"exposed_comm_s", w->exposed_s},
                        {"steps_measured", w->steps}, {"trials", trials}};
  if (!compare.empty()) {
    std::vector<double> sizes{final_mb};
    std::stringstream list(compare);
    for (std::string item; std::getline(list, item, ',');) {
      const double mb = std::stod(item);
      if (std::find(sizes.begin(), sizes.end(), mb) == sizes.end()) sizes.push_back(mb);
    }
    std::map<double, std::vector<Window>> windows;
    for (int round = 0; round < rounds; ++round) {
      for (size_t i = 0; i < sizes.size(); ++i) {
        const double mb = sizes[(i + round) % sizes.size()];
        auto cw = window(mb);
        if (!cw) {
          std::cerr << "compare: no window at " << mb << " MiB in time\n";
          stop();
          return 1;
        }
        std::cerr << "compare round " << round << ": " << mb << " MiB " << cw->step_s * 1e3 << " ms/step\n";
        windows[mb].push_back(*cw);
      }
    }
    nlohmann::json cmp = nlohmann::json::array();
    for (double mb : sizes) {
      std::vector<double> steps, exposed;
      for (const auto& x : windows[mb]) {
        steps.push_back(x.step_s);
        exposed.push_back(x.exposed_s);
      }
      cmp.push_back({{"bucket_mb", mb}, {"step_s", weft::tuner::median(steps)},
                     {"exposed_comm_s", weft::tuner::median(exposed)}, {"windows_step_s", steps}});
    }
    out["compare"] = cmp;
    out["rounds"] = rounds;
  }
  stop();
  std::cout << out.dump() << std::endl;
  return 0;
}
