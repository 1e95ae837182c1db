// weft-worker as a user runs it: exit codes, error messages, signals.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace {

namespace fs = std::filesystem;
const std::string kWorker = std::string(WEFT_BIN_DIR) + "/weft-worker";

struct Result {
  int code = -1;
  std::string output;
};

// Runs argv with stdout+stderr captured; optionally sends `sig` after `delay`.
Result run(const std::vector<std::string>& args, int sig = 0,
           std::chrono::milliseconds delay = std::chrono::milliseconds(0)) {
  fs::path log = fs::temp_directory_path() / ("weft-cli-" + std::to_string(::getpid()) + ".log");
  pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::fopen(log.c_str(), "w");
    dup2(fileno(f), 1);
    dup2(fileno(f), 2);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (sig) {
    std::this_thread::sleep_for(delay);
    kill(pid, sig);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  fs::remove(log);
  return r;
}

fs::path scratch(const std::string& tag) {
  fs::path p = fs::temp_directory_path() / ("weft-cli-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string write(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
  return p.string();
}

nlohmann::json summary(const fs::path& dir) {
  std::ifstream in(dir / "summary.json");
  return nlohmann::json::parse(in);
}

const char* kSmall = R"(preset: tiny
model: {vocab_size: 32, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, max_seq_len: 16}
train: {seq_len: 16, micro_batch: 4, steps: 400, log_every: 100}
data: {branching: 3}
)";

TEST(WorkerCli, BadConfigExitsOneNamingTheField) {
  fs::path d = scratch("badcfg");
  std::string cfg = write(d / "c.yaml", "model:\n  n_heads: 5\n");
  Result r = run({kWorker, cfg});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("model.n_heads"), std::string::npos) << r.output;
  Result missing = run({kWorker, (d / "nope.yaml").string()});
  EXPECT_EQ(missing.code, 1) << missing.output;
  EXPECT_NE(missing.output.find("nope.yaml"), std::string::npos) << missing.output;
  fs::remove_all(d);
}

TEST(WorkerCli, BadShardExitsOneNamingTheFile) {
  fs::path d = scratch("badshard");
  write(d / "junk.bin", std::string(2000, 'x'));
  std::string cfg = write(d / "c.yaml", std::string("preset: tiny\ndata: {source: shards, shards: '") +
                                            (d / "*.bin").string() + "'}\n");
  Result r = run({kWorker, cfg, "--out", (d / "out").string()});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("junk.bin"), std::string::npos) << r.output;
  fs::remove_all(d);
}

// SIGTERM: checkpoint, exit 143; the next start resumes and ends exactly
// where an uninterrupted run ends.
TEST(WorkerCli, SigtermCheckpointsAndResumeMatchesUninterruptedRun) {
  fs::path d = scratch("sigterm");
  std::string cfg = write(d / "c.yaml", kSmall);
  Result full = run({kWorker, cfg, "--out", (d / "full").string()});
  ASSERT_EQ(full.code, 0) << full.output;
  auto ref = summary(d / "full")["losses"].get<std::vector<double>>();

  Result cut = run({kWorker, cfg, "--out", (d / "cut").string()}, SIGTERM,
                   std::chrono::milliseconds(1500));
  ASSERT_EQ(cut.code, 143) << cut.output;
  EXPECT_NE(cut.output.find("checkpoint written"), std::string::npos) << cut.output;
  auto first = summary(d / "cut");
  int64_t stopped_at = first["steps_done"];
  ASSERT_GT(stopped_at, 0) << "stopped before the first step; raise the delay";
  ASSERT_LT(stopped_at, 400) << "finished before the signal; lower the delay";

  Result resumed = run({kWorker, cfg, "--out", (d / "cut").string()});
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  auto second = summary(d / "cut");
  EXPECT_EQ(second["start_step"].get<int64_t>(), stopped_at);
  auto tail = second["losses"].get<std::vector<double>>();
  ASSERT_EQ(tail.size(), ref.size() - stopped_at);
  for (size_t i = 0; i < tail.size(); ++i) ASSERT_EQ(tail[i], ref[stopped_at + i]) << "step " << stopped_at + i + 1;
  fs::remove_all(d);
}

}  // namespace
