// Test helper: starts N rank processes (fork/exec, loopback rendezvous on a
// free port) and collects each one's exit code, output and run time.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace weft::comm::testing {

struct RankResult {
  int code = -1;       // exit code; 128+signal if killed; -1 if still running at the limit
  std::string output;  // stdout and stderr
  double seconds = 0;  // from the rank's start to its exit
};

struct LaunchSpec {
  int world = 2;
  std::vector<std::string> args;                     // argv after the program
  std::map<int, std::map<std::string, std::string>> env_by_rank;  // overrides
  std::map<int, int> start_delay_ms;                 // rank -> delay before exec
  std::vector<int> start_order;                      // empty: 0..world-1
  double limit_s = 60;                               // kill everything after this
  std::vector<int> kill_when_others_exit;            // ranks killed once all others exited
};

std::string bin_path(const std::string& name);      // WEFT_BIN_DIR/name
std::vector<RankResult> launch_ranks(const std::string& program, const LaunchSpec& spec);

// Runs argv to completion (or limit_s), capturing output; -1 on timeout.
RankResult run_command(const std::vector<std::string>& argv, double limit_s,
                       const std::map<std::string, std::string>& env = {},
                       double send_sigterm_after_s = -1);

}  // namespace weft::comm::testing
