// Rank 0's rendezvous store against a client that is not a rank, probed on a
// real weft-worker rank 0 waiting for its gang (issue #70, item 10). Before:
// a client with the token stored 12 x 15 MiB and rank 0 grew by 210 MiB, a
// wrong token's reply carried the job's world size and its launcher's pid,
// and `add` wrapped around at 2^63. Now the store's keys and values are
// capped as a whole, a wrong token is answered with its status byte alone,
// and an add that would overflow is refused with the value unchanged.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <limits>

#include "cli/cli_util.h"
#include "comm/tcp_store.h"
#include "support/net.h"
#include "support/run_process.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using weft::testing::fresh_dir;
using weft::testing::has;
using weft::testing::write_file;
const std::string kWorker = weft::testing::bin("weft-worker");

long rss_mib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6)) / 1024;
  return -1;
}

std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

// Rank 0 of a world of 4 whose other ranks never come, in the background.
struct LoneRankZero {
  pid_t pid = -1;
  int port = 0;
  explicit LoneRankZero(const fs::path& dir) {
    port = weft::testing::free_port();
    const std::string cfg = write_file(dir / "c.yaml", std::string(weft::cli_test::kSmallModel) +
                                                           "comm: {rendezvous_timeout_s: 120}\n");
    const std::string out = (dir / "out").string();
    const std::vector<std::string> env = {"RANK=0", "WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1",
                                          "MASTER_PORT=" + std::to_string(port), "WEFT_RDZV_TOKEN=secret"};
    pid = fork();
    if (pid == 0) {
      for (const std::string& kv : env) putenv(strdup(kv.c_str()));
      int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
      execl(kWorker.c_str(), kWorker.c_str(), cfg.c_str(), "--out", out.c_str(), nullptr);
      _exit(127);
    }
    int fd = weft::testing::connect_loopback(port, 30000ms);  // its store is up
    if (fd >= 0) ::close(fd);
  }
  ~LoneRankZero() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  weft::comm::StoreOptions client(const std::string& token = "secret") const {
    weft::comm::StoreOptions o;
    o.host = "127.0.0.1";
    o.port = static_cast<uint16_t>(port);
    o.token = token;
    o.timeout = 20000ms;
    return o;
  }
};

TEST(StoreLimits, AWrongTokenLearnsNothingAboutTheJob) {
  const fs::path d = fresh_dir("storetoken");
  LoneRankZero rank0(d);
  int fd = weft::testing::connect_loopback(rank0.port, 10000ms);
  ASSERT_GE(fd, 0);
  const std::string token = "guess", job = "world 4, launched by pid 1";
  const std::string body = "\x01" + u32(static_cast<uint32_t>(token.size())) + token +
                           u32(static_cast<uint32_t>(job.size())) + job;
  ASSERT_TRUE(weft::testing::send_all(fd, u32(static_cast<uint32_t>(body.size())) + body));
  std::string reply;
  char buf[256];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, static_cast<size_t>(n));
  ::close(fd);
  // A frame of one byte, the refusal: no world size, no pid.
  EXPECT_EQ(reply, u32(1) + std::string(1, '\x02')) << "reply of " << reply.size() << " bytes: " << reply;
  try {
    weft::comm::TcpStore c(rank0.client("guess"));
    FAIL() << "a wrong token must be refused";
  } catch (const weft::comm::TokenRejectedError& e) {
    EXPECT_TRUE(has(e.what(), "rejected this rank's token")) << e.what();
    EXPECT_FALSE(has(e.what(), "world 4")) << e.what();
  }
  fs::remove_all(d);
}

TEST(StoreLimits, AClientWithTheTokenCannotGrowRankZeroWithoutBound) {
  const fs::path d = fresh_dir("storecap");
  LoneRankZero rank0(d);
  weft::comm::TcpStore c(rank0.client());
  const long before = rss_mib(rank0.pid);
  const std::string blob(15u << 20, 'x');
  int stored = 0;
  std::string refusal;
  for (int i = 0; i < 12; ++i) {
    try {
      c.set("blob/" + std::to_string(i), blob);
      ++stored;
    } catch (const weft::comm::RendezvousError& e) {
      refusal = e.what();
    }
  }
  const long grown = rss_mib(rank0.pid) - before;
  std::printf("stored %d of 12 values of 15 MiB; rank 0 grew by %ld MiB\n", stored, grown);
  EXPECT_LE(stored, 5);
  EXPECT_TRUE(has(refusal, "is full")) << refusal;
  EXPECT_LT(grown, 150) << "12 x 15 MiB offered";
  // Rank 0 still serves: a small set, and a value replaced in place.
  c.set("small", "1");
  EXPECT_EQ(c.get("small"), "1");
  c.set("blob/0", "gone");
  c.set("blob/" + std::to_string(stored), blob);  // the room freed by the replacement
  fs::remove_all(d);
}

TEST(StoreLimits, AnAddThatWouldOverflowIsRefusedAndTheValueKept) {
  const fs::path d = fresh_dir("storeadd");
  LoneRankZero rank0(d);
  weft::comm::TcpStore c(rank0.client());
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(c.add("n", kMax), kMax);
  try {
    c.add("n", 1);
    FAIL() << "2^63 - 1 + 1 must be refused, not wrap";
  } catch (const weft::comm::RendezvousError& e) {
    EXPECT_TRUE(has(e.what(), "does not fit 64 bits")) << e.what();
  }
  EXPECT_EQ(c.get("n"), std::to_string(kMax));
  EXPECT_EQ(c.add("n", -1), kMax - 1);
  c.set("text", "abc");
  EXPECT_THROW(c.add("text", 1), weft::comm::RendezvousError);
  fs::remove_all(d);
}

}  // namespace
