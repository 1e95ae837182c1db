// Test support: run a program as a user would and capture what it printed.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace weft::testing {

struct ProcessResult {
  int code = -1;  // exit code, or 128 + signal
  std::string output;  // stdout and stderr, interleaved
  int pid = 0;         // the process's id, gone by the time this is returned
  double seconds_after_signal = -1;  // from sending `sig` to the exit; -1 when it was never sent
};

// Runs argv[0] with argv (extra_env as "K=V" entries added to the
// environment). If sig != 0, sends it once the output contains `signal_when`
// (immediately if empty), `signal_delay` after that. Kills the process after
// `timeout` and reports code 137 with a note in the output.
ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env = {},
                          int sig = 0, const std::string& signal_when = "",
                          std::chrono::seconds timeout = std::chrono::seconds(600),
                          std::chrono::milliseconds signal_delay = std::chrono::milliseconds(0));

// When to send the signal: called with the output so far (every 10 ms) until
// it returns a delay; the signal goes that long after. For a moment that
// depends on what the process printed (half of a step it timed, say).
using SignalWhen = std::function<std::optional<std::chrono::milliseconds>(const std::string& output)>;
ProcessResult run_and_signal(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env, int sig,
                             const SignalWhen& when, std::chrono::seconds timeout);

// A fresh empty directory under the system temp dir.
std::filesystem::path fresh_dir(const std::string& tag);

std::string write_file(const std::filesystem::path& p, const std::string& text);

std::string bin(const std::string& program);  // WEFT_BIN_DIR/program

// Whether a program's output contains `what`.
inline bool has(const std::string& output, const std::string& what) { return output.find(what) != std::string::npos; }

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace weft::testing
