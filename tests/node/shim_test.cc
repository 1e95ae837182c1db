// The shim runs a real process in its own mount and UTS namespaces (root and
// unshare are needed; skipped otherwise), and volumes are written atomically.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "node/pod_process.h"
#include "node/volumes.h"

namespace weft::node {
namespace {
namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/weft-node-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string slurp(const fs::path& p) {
  std::string s;
  read_file(p.string(), &s);
  return s;
}

Json run_shim_and_wait(const LaunchSpec& L, const fs::path& dir) {
  write_json_atomic((dir / "launch.json").string(), to_json(L));
  std::string err;
  pid_t shim = spawn_shim(WEFT_BIN_DIR "/weft-node", (dir / "launch.json").string(), &err);
  EXPECT_GT(shim, 0) << err;
  int status = 0;
  ::waitpid(shim, &status, 0);
  auto ex = read_json(L.exit_file);
  return ex ? *ex : Json();
}

TEST(Shim, RunsTheCommandWithHostnameHostsAndVolumesAndReportsTheExitCode) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for mount namespaces";
  TempDir t;
  fs::create_directories(t.path / "vol");
  std::ofstream(t.path / "vol" / "config.yaml") << "preset: tiny\n";
  std::ofstream(t.path / "hosts") << "127.1.0.1\tjob-0.job.ns.svc\n";
  LaunchSpec L;
  L.argv = {"/bin/sh", "-c",
            "echo host=$(hostname); getent hosts job-0.job.ns.svc; cat " + (t.path / "mnt/cfg/config.yaml").string() +
                "; echo x > " + (t.path / "mnt/cfg/new").string() + " || echo read-only; echo env=$FOO; pwd; exit 3"};
  L.env = {"FOO=bar", "PATH=/usr/bin:/bin"};
  L.cwd = t.path.string();
  L.hostname = "job-1";
  L.hosts_file = (t.path / "hosts").string();
  L.mounts = {{(t.path / "vol").string(), (t.path / "mnt/cfg").string(), true}};
  L.log_file = (t.path / "log").string();
  L.pid_file = (t.path / "pid.json").string();
  L.exit_file = (t.path / "exit.json").string();
  Json ex = run_shim_and_wait(L, t.path);
  const std::string log = slurp(t.path / "log");
  if (log.find("unshare: Operation not permitted") != std::string::npos) GTEST_SKIP() << "no mount namespaces here";
  EXPECT_EQ(ex.value("exitCode", -1), 3) << log;
  EXPECT_NE(log.find("host=job-1"), std::string::npos) << log;
  EXPECT_NE(log.find("127.1.0.1"), std::string::npos) << "hosts file not bind-mounted:\n" << log;
  EXPECT_NE(log.find("preset: tiny"), std::string::npos) << log;
  EXPECT_NE(log.find("read-only"), std::string::npos) << log;
  EXPECT_NE(log.find("env=bar"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(t.path / "vol" / "new"));
  EXPECT_TRUE(fs::exists(t.path / "pid.json"));
  char host[256] = {};
  ::gethostname(host, sizeof host);
  EXPECT_NE(std::string(host), "job-1") << "the agent's own hostname changed";
}

TEST(Shim, MissingExecutableIsAStartError) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for mount namespaces";
  TempDir t;
  LaunchSpec L;
  L.argv = {"/nonexistent/weft-worker"};
  L.cwd = t.path.string();
  L.log_file = (t.path / "log").string();
  L.pid_file = (t.path / "pid.json").string();
  L.exit_file = (t.path / "exit.json").string();
  Json ex = run_shim_and_wait(L, t.path);
  EXPECT_EQ(ex.value("exitCode", -1), 128);
  EXPECT_EQ(ex.value("reason", ""), "StartError");
  EXPECT_NE(ex.value("message", "").find("/nonexistent/weft-worker"), std::string::npos);
}

TEST(Shim, KilledProcessReports137) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for mount namespaces";
  TempDir t;
  LaunchSpec L;
  L.argv = {"/bin/sleep", "30"};
  L.cwd = t.path.string();
  L.log_file = (t.path / "log").string();
  L.pid_file = (t.path / "pid.json").string();
  L.exit_file = (t.path / "exit.json").string();
  write_json_atomic((t.path / "launch.json").string(), to_json(L));
  std::string err;
  pid_t shim = spawn_shim(WEFT_BIN_DIR "/weft-node", (t.path / "launch.json").string(), &err);
  ASSERT_GT(shim, 0);
  std::optional<Json> pid;
  for (int i = 0; i < 100 && !(pid = read_json(L.pid_file)); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(pid);
  ::kill(-pid->value("pid", -1), SIGKILL);
  int status = 0;
  ::waitpid(shim, &status, 0);
  auto ex = read_json(L.exit_file);
  ASSERT_TRUE(ex);
  EXPECT_EQ(ex->value("exitCode", -1), 137);
  EXPECT_EQ(ex->value("signal", 0), 9);
}

TEST(Volumes, AtomicDirSwapsDataAndDropsRemovedKeys) {
  TempDir t;
  const std::string d = (t.path / "cfg").string();
  ASSERT_EQ(write_atomic_dir(d, {{"config.yaml", "a"}, {"bucket_cap_mb", "4"}}, 0644), "");
  EXPECT_EQ(slurp(t.path / "cfg/config.yaml"), "a");
  EXPECT_TRUE(fs::is_symlink(t.path / "cfg/config.yaml"));
  ASSERT_EQ(write_atomic_dir(d, {{"config.yaml", "b"}}, 0644), "");
  EXPECT_EQ(slurp(t.path / "cfg/config.yaml"), "b");
  EXPECT_FALSE(fs::exists(t.path / "cfg/bucket_cap_mb"));
  int data_dirs = 0;
  for (const auto& e : fs::directory_iterator(d)) data_dirs += e.path().filename().string().rfind("..w", 0) == 0;
  EXPECT_EQ(data_dirs, 1) << "old data directories are removed";
}

TEST(Volumes, RewriteInPlaceKeepsTheInode) {
  TempDir t;
  const std::string p = (t.path / "hosts").string();
  ASSERT_EQ(rewrite_in_place(p, "long old content\n"), "");
  const auto ino = fs::status(p).type();
  struct stat a{}, b{};
  ::stat(p.c_str(), &a);
  ASSERT_EQ(rewrite_in_place(p, "new\n"), "");
  ::stat(p.c_str(), &b);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(slurp(p), "new\n");
  (void)ino;
  EXPECT_EQ(tail_of_file(p, 1, 100), "new\n");
}

}  // namespace
}  // namespace weft::node
