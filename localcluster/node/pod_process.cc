#include "node/pod_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kube/clock.h"
#include "node/pod_status.h"
#include "node/volumes.h"

extern char** environ;

namespace weft::node {
namespace {

std::string now_rfc3339() { return kube::format_time(std::chrono::system_clock::now()); }

// Creates the mount point: a directory, or an empty file for a file source.
std::string ensure_target(const std::string& target, bool is_file) {
  struct stat st{};
  if (::stat(target.c_str(), &st) == 0) return "";
  if (!is_file) return make_dirs(target);
  const auto slash = target.find_last_of('/');
  if (slash != std::string::npos && slash > 0)
    if (auto err = make_dirs(target.substr(0, slash)); !err.empty()) return err;
  int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return target + ": " + std::strerror(errno);
  ::close(fd);
  return "";
}

}  // namespace

Json to_json(const LaunchSpec& s) {
  Json mounts = Json::array();
  for (const auto& m : s.mounts) mounts.push_back({{"source", m.source}, {"target", m.target}, {"readOnly", m.read_only}});
  return {{"argv", s.argv},          {"env", s.env},           {"cwd", s.cwd},
          {"hostname", s.hostname},  {"hostsFile", s.hosts_file}, {"mounts", mounts}, {"nodeDirs", s.node_dirs},
          {"logFile", s.log_file},   {"pidFile", s.pid_file},  {"exitFile", s.exit_file}};
}

LaunchSpec launch_from_json(const Json& j) {
  LaunchSpec s;
  s.argv = j.at("argv").get<std::vector<std::string>>();
  s.env = j.at("env").get<std::vector<std::string>>();
  s.cwd = j.value("cwd", "/");
  s.hostname = j.value("hostname", "");
  s.hosts_file = j.value("hostsFile", "");
  for (const auto& m : j.value("mounts", Json::array()))
    s.mounts.push_back({m.value("source", ""), m.value("target", ""), m.value("readOnly", false)});
  s.node_dirs = j.value("nodeDirs", std::vector<std::string>{});
  s.log_file = j.value("logFile", "");
  s.pid_file = j.value("pidFile", "");
  s.exit_file = j.value("exitFile", "");
  return s;
}

std::optional<Json> read_json(const std::string& path) {
  std::string text;
  if (!read_file(path, &text)) return std::nullopt;
  auto j = Json::parse(text, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

namespace {

// Written relative to a directory opened before the shim's mounts, which
// may hide the path (a volume mounted over the state directory's parent).
bool write_json_at(int dirfd, const std::string& name, const Json& j) {
  const std::string tmp = name + ".tmp", text = j.dump() + "\n";
  int fd = ::openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok && ::renameat(dirfd, tmp.c_str(), dirfd, name.c_str()) == 0;
}

std::string dir_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}
std::string base_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

bool write_json_atomic(const std::string& path, const Json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump() << "\n";
    if (!out) return false;
  }
  return ::rename(tmp.c_str(), path.c_str()) == 0;
}

int run_shim(const std::string& launch_path) {
  auto launch_json = read_json(launch_path);
  if (!launch_json) {
    std::fprintf(stderr, "weft-node shim: cannot read %s\n", launch_path.c_str());
    return 2;
  }
  const LaunchSpec L = launch_from_json(*launch_json);
  const std::string started = now_rfc3339();
  const int run_dir = ::open(dir_of(L.exit_file).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  const std::string exit_name = base_of(L.exit_file), pid_name = base_of(L.pid_file);
  auto fail = [&](const std::string& msg) {
    std::fprintf(stderr, "weft-node: %s\n", msg.c_str());
    write_json_at(run_dir, exit_name, {{"exitCode", 128}, {"signal", 0}, {"startedAt", started},
                                    {"finishedAt", now_rfc3339()}, {"reason", "StartError"}, {"message", msg}});
    return 1;
  };
  int log = ::open(L.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log >= 0) {
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::close(log);
  }
  int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0) ::dup2(devnull, 0), ::close(devnull);
  ::setsid();

  if (::unshare(CLONE_NEWNS | CLONE_NEWUTS) != 0) return fail(std::string("unshare: ") + std::strerror(errno));
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return fail(std::string("make / private: ") + std::strerror(errno));
  // Sources are opened (in the new namespace) before anything is mounted: a
  // volume mounted at /tmp must not hide the directory another source is in.
  std::vector<int> source_fds;
  // Likewise the working directory and the program: the agent's state (and a
  // build's binaries) may live under a path a volume covers, e.g. /tmp.
  int cwd_fd = -1, exe_fd = -1;
  if (!L.cwd.empty() && (cwd_fd = ::open(L.cwd.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
    return fail("working directory " + L.cwd + ": " + std::strerror(errno));
  if (!L.argv.empty() && !L.argv[0].empty() && L.argv[0][0] == '/') {
    // Not close-on-exec: an interpreter started for a script reads it through
    // /proc/self/fd/N.
    // When it cannot be opened, execve below reports why, as for a relative name.
    exe_fd = ::open(L.argv[0].c_str(), O_PATH);
  }
  for (const auto& m : L.mounts) {
    int fd = ::open(m.source.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0) return fail("volume source " + m.source + ": " + std::strerror(errno));
    source_fds.push_back(fd);
  }
  std::vector<std::pair<std::string, int>> node_dir_fds;  // missing ones are skipped
  for (const auto& d : L.node_dirs)
    if (int fd = ::open(d.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC); fd >= 0) node_dir_fds.emplace_back(d, fd);
  if (!L.hostname.empty() && ::sethostname(L.hostname.data(), L.hostname.size()) != 0)
    return fail("sethostname " + L.hostname + ": " + std::strerror(errno));
  if (!L.hosts_file.empty() && ::mount(L.hosts_file.c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) != 0)
    return fail("bind " + L.hosts_file + " on /etc/hosts: " + std::strerror(errno));
  for (size_t i = 0; i < L.mounts.size(); ++i) {
    const auto& m = L.mounts[i];
    struct stat st{};
    ::fstat(source_fds[i], &st);
    if (auto err = ensure_target(m.target, !S_ISDIR(st.st_mode)); !err.empty()) return fail("mount point " + err);
    const std::string src = "/proc/self/fd/" + std::to_string(source_fds[i]);
    if (::mount(src.c_str(), m.target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
      return fail("bind " + m.source + " on " + m.target + ": " + std::strerror(errno));
    if (m.read_only &&
        ::mount(nullptr, m.target.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0)
      return fail("read-only " + m.target + ": " + std::strerror(errno));
    ::close(source_fds[i]);
  }
  // A node directory a volume now hides is bound back at its own path.
  for (const auto& [dir, fd] : node_dir_fds) {
    struct stat was{}, now{};
    ::fstat(fd, &was);
    const bool hidden = ::stat(dir.c_str(), &now) != 0 || now.st_dev != was.st_dev || now.st_ino != was.st_ino;
    if (hidden) {
      if (auto err = ensure_target(dir, false); !err.empty()) return fail("node directory " + err);
      const std::string src = "/proc/self/fd/" + std::to_string(fd);
      if (::mount(src.c_str(), dir.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
        return fail("bind " + dir + " back on itself: " + std::strerror(errno));
    }
    ::close(fd);
  }

  std::vector<char*> argv, envp;
  for (const auto& a : L.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : L.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int exec_pipe[2];
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) return fail(std::string("pipe: ") + std::strerror(errno));
  const pid_t child = ::fork();
  if (child < 0) return fail(std::string("fork: ") + std::strerror(errno));
  if (child == 0) {
    ::setpgid(0, 0);
    ::close(exec_pipe[0]);
    int err = 0;
    if (cwd_fd >= 0 && ::fchdir(cwd_fd) != 0) err = errno;
    if (!err) {
      if (exe_fd >= 0)
        ::fexecve(exe_fd, argv.data(), envp.data());
      else
        ::execve(argv[0], argv.data(), envp.data());
      err = errno;
    }
    (void)!::write(exec_pipe[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(exec_pipe[1]);
  ::setpgid(child, child);  // also from here, so the group exists before anyone signals it
  int exec_err = 0;
  const bool exec_failed = ::read(exec_pipe[0], &exec_err, sizeof exec_err) == sizeof exec_err;
  ::close(exec_pipe[0]);
  write_json_at(run_dir, pid_name, {{"pid", child}, {"startedAt", started}});
  // The agent signals the container's process group, not the shim; the shim
  // must still survive a stray SIGTERM/SIGINT to report the exit.
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (exec_failed) {
    const std::string what = exec_err == ENOENT ? "no such file or directory" : std::strerror(exec_err);
    std::fprintf(stderr, "weft-node: exec %s (cwd %s): %s\n", L.argv[0].c_str(), L.cwd.c_str(), what.c_str());
    write_json_at(run_dir, exit_name, {{"exitCode", 128}, {"signal", 0}, {"startedAt", started},
                                    {"finishedAt", now_rfc3339()}, {"reason", "StartError"},
                                    {"message", "exec " + L.argv[0] + ": " + what}});
    return 0;
  }
  write_json_at(run_dir, exit_name, {{"exitCode", exit_code_of(status)},
                                  {"signal", WIFSIGNALED(status) ? WTERMSIG(status) : 0},
                                  {"startedAt", started},
                                  {"finishedAt", now_rfc3339()}});
  return 0;
}

pid_t spawn_shim(const std::string& self_exe, const std::string& launch_path, std::string* err) {
  std::vector<std::string> args = {self_exe, "shim", launch_path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The shim starts with default signal dispositions and an empty mask
  // whatever the agent's threads have blocked.
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, self_exe.c_str(), nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    *err = "spawn " + self_exe + ": " + std::strerror(rc);
    return -1;
  }
  return pid;
}

unsigned long long process_start_ticks(pid_t pid) {
  std::string stat;
  if (pid <= 0 || !read_file("/proc/" + std::to_string(pid) + "/stat", &stat)) return 0;
  // Field 3 is the state, field 22 the start time; the command (field 2)
  // may contain spaces, so count from its closing parenthesis.
  auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  char state = 0;
  unsigned long long ticks = 0;
  for (int i = 3; in >> field; ++i) {
    if (i == 3) state = field[0];
    if (i == 22) {
      ticks = std::stoull(field);
      break;
    }
  }
  return state == 'Z' || state == 'X' ? 0 : ticks;
}

bool process_alive(pid_t pid, unsigned long long start_ticks) {
  const unsigned long long t = process_start_ticks(pid);
  return t != 0 && (start_ticks == 0 || t == start_ticks);
}

std::optional<std::string> find_executable(const std::string& name, const std::vector<std::string>& dirs) {
  if (name.find('/') != std::string::npos) return name;
  for (const auto& d : dirs) {
    if (d.empty()) continue;
    const std::string p = d + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return std::nullopt;
}

}  // namespace weft::node
