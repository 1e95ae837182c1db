// Helpers for the metrics tests: parse Prometheus text exposition, read the
// dashboard's queries, and run child processes (weft-run, prometheus,
// promtool) with deadlines. Loopback HTTP is support/net.h's.
#pragma once

#include <sys/types.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace weft::metrics_test {

// A communicator that only reports the stats a test sets.
class StatsOnlyComm : public comm::Communicator {
 public:
  explicit StatsOnlyComm(std::string name) : name_(std::move(name)) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& members() const override { return members_; }
  comm::WorkPtr all_reduce(const Tensor&, comm::ReduceOp, const std::string&) override {
    return nullptr;
  }
  comm::WorkPtr reduce_scatter(const Tensor&, const Tensor&, comm::ReduceOp,
                               const std::vector<int64_t>&, const std::string&) override {
    return nullptr;
  }
  comm::WorkPtr all_gather(const Tensor&, const Tensor&, const std::vector<int64_t>&,
                           const std::string&) override {
    return nullptr;
  }
  comm::WorkPtr all_to_all(const Tensor&, const Tensor&, const std::vector<int64_t>&,
                           const std::vector<int64_t>&, const std::string&) override {
    return nullptr;
  }
  comm::WorkPtr broadcast(const Tensor&, int, const std::string&) override { return nullptr; }
  comm::WorkPtr barrier(const std::string&) override { return nullptr; }
  comm::CommStats stats() const override { return stats_; }

  comm::CommStats stats_;

 private:
  std::string name_;
  std::vector<int> members_{0, 1};
};

// Samples of a text exposition keyed as name{label="value",...} with labels
// sorted by name (no braces when there are none).
std::map<std::string, double> parse_exposition(const std::string& text);
std::string sample_key(const std::string& name, std::map<std::string, std::string> labels = {});
// Every sample name in the exposition (including _bucket/_sum/_count).
std::set<std::string> sample_names(const std::string& text);

// The dashboard as shipped in the chart.
std::string dashboard_path();
nlohmann::json load_dashboard();
// Every panel, nested row panels included.
std::vector<nlohmann::json> all_panels(const nlohmann::json& dash);
struct DashboardQuery {
  std::string panel;  // panel title
  std::string expr;
};
std::vector<DashboardQuery> dashboard_queries(const nlohmann::json& dash);
// weft_* metric names an expression refers to.
std::set<std::string> referenced_metrics(const std::string& expr);
// Replaces Grafana variables ($namespace, ${job}, $__rate_interval, ...).
std::string substitute(std::string expr, const std::map<std::string, std::string>& vars);

std::string url_encode(const std::string& s);

bool executable_exists(const std::string& path);

// A child process in its own process group, stdout+stderr to `log_path`;
// `env` entries override the inherited environment, an empty value unsets.
struct Child {
  pid_t pid = -1;
  std::string log_path;
};
Child spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const std::string& log_path);
// SIGTERM to the group, SIGKILL after grace_s; returns the exit code (128+sig if killed).
int stop(Child& c, double grace_s = 10);
bool running(const Child& c);
std::string read_file(const std::string& path);
// Runs a shell command, returning its exit code and combined output.
int run_shell(const std::string& cmd, std::string* output);

}  // namespace weft::metrics_test
