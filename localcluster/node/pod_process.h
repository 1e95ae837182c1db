// One run of a pod's container as local processes: weft-node starts a shim
// (`weft-node shim LAUNCH.json`, a re-exec of itself) that
//   1. starts its own session, so the pod outlives an agent that is killed;
//   2. enters private mount and UTS namespaces, sets the pod's hostname,
//      bind-mounts the pod's hosts file over /etc/hosts and every volume at
//      its mountPath (read-only where asked);
//   3. forks the container's process as leader of its own process group
//      (signals go to the whole group), output appended to the run's log;
//   4. waits for it and writes exit.json (exit code, signal, times) before it
//      exits itself.
// Because the result is a file written by the shim, an agent that restarts
// learns how a run ended even if it ended while the agent was down.
#pragma once

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace weft::node {

using Json = nlohmann::json;

struct BindMount {
  std::string source;   // host path
  std::string target;   // path inside the pod
  bool read_only = false;
};

struct LaunchSpec {
  std::vector<std::string> argv;   // argv[0] resolved to an absolute path
  std::vector<std::string> env;    // "NAME=value"
  std::string cwd;
  std::string hostname;
  std::string hosts_file;          // bind-mounted over /etc/hosts
  std::vector<BindMount> mounts;
  // Node directories that stay visible at their own path after the volumes
  // are mounted (the agent's --bin-dir: a program started in the pod, such as
  // weft-run starting weft-worker, must still find its siblings when the
  // build tree lies under a volume's mountPath, e.g. a clone in /tmp under
  // the pod's /tmp emptyDir). An image would hold them in its root filesystem.
  std::vector<std::string> node_dirs;
  std::string log_file;            // stdout and stderr, appended
  std::string pid_file;            // written by the shim: {"pid", "startedAt"}
  std::string exit_file;           // written by the shim: {"exitCode", "signal", "finishedAt", "reason", "message"}
};

Json to_json(const LaunchSpec& s);
LaunchSpec launch_from_json(const Json& j);

// The shim's main (see file comment); returns its exit status.
int run_shim(const std::string& launch_path);

// Starts `self_exe shim launch_path`; returns the shim's pid or -1 (errno in *err).
pid_t spawn_shim(const std::string& self_exe, const std::string& launch_path, std::string* err);

// Alive and not a zombie; when `start_ticks` is non-zero it must also match
// the process's start time (guards against a reused pid).
bool process_alive(pid_t pid, unsigned long long start_ticks = 0);
unsigned long long process_start_ticks(pid_t pid);  // 0 when gone

// First existing executable among dirs/name; `name` with a '/' is taken as is.
std::optional<std::string> find_executable(const std::string& name, const std::vector<std::string>& dirs);

std::optional<Json> read_json(const std::string& path);
bool write_json_atomic(const std::string& path, const Json& j);

}  // namespace weft::node
