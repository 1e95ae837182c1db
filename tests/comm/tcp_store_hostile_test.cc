// The rendezvous store against clients that are not ranks: whatever can reach
// MASTER_PORT may connect, declare huge messages, idle, or trickle bytes. The
// store must stay small, keep its one thread, and keep serving the real ranks.
#include "comm/tcp_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "support/net.h"

namespace weft::comm {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

StoreOptions opts(uint16_t port, std::string token = "t", std::string job = "") {
  StoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.token = std::move(token);
  o.job = std::move(job);
  o.timeout = 20000ms;
  return o;
}

long status_field(const char* name) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(name, 0) == 0) return std::stol(line.substr(std::strlen(name)));
  return -1;
}
long resident_mb() { return status_field("VmRSS:") / 1024; }
long threads() { return status_field("Threads:"); }

std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

std::string hello_frame(const std::string& token) {
  std::string body = "\x01" + u32(static_cast<uint32_t>(token.size())) + token;
  return u32(static_cast<uint32_t>(body.size())) + body;
}

// True when the peer closed `fd` (EOF or reset) within `limit`.
bool closed_by_peer(int fd, std::chrono::milliseconds limit) {
  auto until = Clock::now() + limit;
  char buf[256];
  while (Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
    if (::poll(&p, 1, std::max(left, 1)) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
  return false;
}

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 20000ms) {
  auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

TEST(TcpStoreHostile, OversizedFramesBeforeTheTokenAllocateNothing) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  const long before = resident_mb();
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) {
    int fd = weft::testing::connect_loopback(server.port());
    ASSERT_GE(fd, 0);
    // 5 bytes: a length of 64 MiB and one byte of it.
    ASSERT_TRUE(weft::testing::send_all(fd, u32(64u << 20) + "\x01"));
    fds.push_back(fd);
  }
  for (int fd : fds) {
    EXPECT_TRUE(closed_by_peer(fd, 20000ms)) << "a declared 64 MiB hello must be refused at once";
    ::close(fd);
  }
  EXPECT_LT(resident_mb() - before, 32) << "20 frames declaring 64 MiB each";
  // The store still works.
  TcpStore c(opts(server.port()));
  c.set("k", "v");
  EXPECT_EQ(c.get("k"), "v");
}

TEST(TcpStoreHostile, MembersKeepAValueLimit) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  TcpStore c(opts(server.port()));
  std::string mib(1 << 20, 'x');
  c.set("big", mib);
  EXPECT_EQ(c.get("big"), mib);
  try {
    c.set("huge", std::string(kMaxStoreValue + 1, 'x'));
    FAIL() << "a value over the limit must be refused";
  } catch (const RendezvousError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'huge'"));
    EXPECT_THAT(e.what(), HasSubstr("limit"));
  }
  // A member that declares more than the limit on the wire is disconnected;
  // a declared length within it allocates only what arrives.
  int fd = weft::testing::connect_loopback(server.port());
  ASSERT_TRUE(weft::testing::send_all(fd, hello_frame("t")));
  char ok[5];
  ASSERT_EQ(::recv(fd, ok, 5, MSG_WAITALL), 5);
  EXPECT_EQ(ok[4], 0);
  ASSERT_TRUE(weft::testing::send_all(fd, u32(kMaxStoreValue + 1024)));
  EXPECT_TRUE(closed_by_peer(fd, 20000ms));
  ::close(fd);
  c.set("after", "1");
  EXPECT_EQ(c.get("after"), "1");
}

TEST(TcpStoreHostile, IdleConnectionsCostNoThreadAndDoNotLockOutRanks) {
  TcpStoreServerOptions o;
  o.max_pending = 64;
  TcpStoreServer server("127.0.0.1", 0, "t", o);
  TcpStore member(opts(server.port()));  // connected before the flood
  const long threads_before = threads();
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    int fd = weft::testing::connect_loopback(server.port());
    ASSERT_GE(fd, 0) << "connection " << i;
    idle.push_back(fd);
  }
  // The store has taken them all in and holds at most max_pending.
  EXPECT_TRUE(eventually([&] { return server.counts().open >= 1 + o.max_pending; }));
  EXPECT_LE(server.counts().open, 1 + o.max_pending);
  EXPECT_LE(threads(), threads_before) << "the store must not start a thread per connection";
  // A rank connecting now gets in, and the member is still served.
  TcpStore late(opts(server.port()));
  late.set("k", "v");
  EXPECT_EQ(member.get("k"), "v");
  EXPECT_EQ(server.counts().members, 2u);
  EXPECT_LE(server.counts().open, 2 + o.max_pending);
  for (int fd : idle) ::close(fd);
}

TEST(TcpStoreHostile, ASlowHelloIsClosedAtTheDeadline) {
  TcpStoreServerOptions o;
  o.hello_timeout = 500ms;
  TcpStoreServer server("127.0.0.1", 0, "t", o);
  int fd = weft::testing::connect_loopback(server.port());
  ASSERT_GE(fd, 0);
  // One byte of a valid hello every 100 ms: each byte is on time, the whole
  // hello is not.
  const std::string h = hello_frame(std::string(200, 't'));
  const auto t0 = Clock::now();
  bool closed = false;
  for (size_t i = 0; i < h.size() && !closed; ++i) {
    if (!weft::testing::send_all(fd, h.substr(i, 1))) break;
    closed = closed_by_peer(fd, 100ms);
    if (Clock::now() - t0 > 20s) break;
  }
  if (!closed) closed = closed_by_peer(fd, 20000ms);
  EXPECT_TRUE(closed);
  EXPECT_GE(Clock::now() - t0, 400ms);
  EXPECT_LT(Clock::now() - t0, 15s);
  ::close(fd);
  EXPECT_TRUE(eventually([&] { return server.counts().open == 0; }));
}

TEST(TcpStoreHostile, NewcomersAreRefusedOnceTheGangFormed) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  TcpStore a(opts(server.port())), b(opts(server.port()));
  server.close_membership();
  try {
    TcpStore late(opts(server.port()));
    FAIL() << "the store must refuse a member after the gang formed";
  } catch (const TokenRejectedError&) {
    FAIL() << "a refusal after formation is not a token problem";
  } catch (const RendezvousError& e) {
    EXPECT_THAT(e.what(), HasSubstr("already formed"));
  }
  a.set("k", "v");
  EXPECT_EQ(b.get("k"), "v");
  EXPECT_EQ(b.add("n", 2), 2);
  EXPECT_EQ(server.counts().members, 2u);
}

// A refused token learns nothing of the store's job (its world size, its
// launcher's pid): the reply is the status byte alone. Rank 0's log, not the
// client, tells a port shared with another job from a wrong token.
TEST(TcpStoreHostile, ARefusedTokenLearnsNothingAndRankZerosLogSaysWhetherItIsAnotherJob) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  spdlog::default_logger()->sinks().push_back(sink);
  TcpStoreServerOptions o;
  o.job = "world 2, launched by pid 100";
  TcpStoreServer server("127.0.0.1", 0, "secret", o);
  try {
    TcpStore c(opts(server.port(), "other-secret", "world 2, launched by pid 200"));
    FAIL();
  } catch (const TokenRejectedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rejected this rank's token"));
    EXPECT_THAT(e.what(), HasSubstr("another job's store"));
    EXPECT_THAT(e.what(), HasSubstr("MASTER_PORT"));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("pid 100")));
  }
  int fd = weft::testing::connect_loopback(server.port());
  ASSERT_TRUE(weft::testing::send_all(fd, hello_frame("guess")));
  std::string reply;
  char buf[256];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_EQ(reply, u32(1) + std::string(1, '\x02'));
  spdlog::default_logger()->sinks().pop_back();
  std::string log;
  for (auto& line : sink->last_formatted()) log += line;
  EXPECT_THAT(log, HasSubstr("refused 127.0.0.1:"));
  EXPECT_THAT(log, HasSubstr("wrong WEFT_RDZV_TOKEN"));
  EXPECT_THAT(log, HasSubstr("pid 200"));
  EXPECT_THAT(log, HasSubstr("another job shares MASTER_PORT"));
  // The right token and job still get in.
  TcpStore ok(opts(server.port(), "secret", o.job));
  ok.set("k", "v");
}

// The keys and values held together stay under max_bytes: a set past it is
// refused with the store unchanged, a replacement counts only its growth.
TEST(TcpStoreHostile, MembersShareATotalByteLimit) {
  TcpStoreServerOptions o;
  o.max_bytes = 3u << 20;
  TcpStoreServer server("127.0.0.1", 0, "t", o);
  TcpStore c(opts(server.port()));
  const std::string mib(1 << 20, 'x');
  c.set("a", mib);
  c.set("b", mib);
  try {
    c.set("c", mib + mib);
    FAIL() << "3 MiB + 2 MiB held must be refused";
  } catch (const RendezvousError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is full"));
  }
  EXPECT_LE(server.counts().bytes, o.max_bytes);
  EXPECT_THROW(c.get("c", 100ms), RendezvousError);  // not stored
  c.set("a", "small");                                 // frees a MiB
  c.set("c", mib);
  EXPECT_EQ(c.get("c"), mib);
  // Many empty keys count too (64 bytes of bookkeeping each).
  TcpStoreServerOptions tiny;
  tiny.max_bytes = 64 * 100;
  TcpStoreServer small("127.0.0.1", 0, "t", tiny);
  TcpStore s(opts(small.port()));
  int stored = 0;
  try {
    for (; stored < 1000; ++stored) s.set("k" + std::to_string(stored), "");
  } catch (const RendezvousError&) {
  }
  EXPECT_LT(stored, 100);
}

TEST(TcpStoreHostile, AddRefusesOverflowAndNonIntegers) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  TcpStore c(opts(server.port()));
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(c.add("up", kMax), kMax);
  EXPECT_THROW(c.add("up", 1), RendezvousError);
  EXPECT_EQ(c.get("up"), std::to_string(kMax));
  EXPECT_EQ(c.add("down", kMin), kMin);
  EXPECT_THROW(c.add("down", -1), RendezvousError);
  c.set("word", "12abc");
  try {
    c.add("word", 1);
    FAIL();
  } catch (const RendezvousError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'12abc' is not an integer"));
  }
}

// A refusal answers every read of its attempt, parked or later, with the
// rank and its reason; another attempt's reads are not touched; the server
// counts who heard.
TEST(TcpStoreHostile, ARefusalAnswersEveryReadOfItsAttempt) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  TcpStore waiter(opts(server.port())), refuser(opts(server.port()));
  StoreOptions next = opts(server.port());
  next.attempt = 1;
  TcpStore other_attempt(next);
  std::string parked;
  std::thread t([&] {
    try {
      waiter.get("never-set", 20000ms);
    } catch (const RankRefusedError& e) {
      parked = e.what();
    }
  });
  ASSERT_TRUE(eventually([&] { return server.counts().members == 3; }));
  std::this_thread::sleep_for(100ms);  // the get is parked
  const auto t0 = Clock::now();
  refuser.refuse("rank 1", "bad config: optim.lr: must be > 0");
  t.join();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5);
  EXPECT_EQ(parked, "rendezvous: rank 1 refused to join the job: bad config: optim.lr: must be > 0");
  // A later read, even of a key that exists, hears it too.
  refuser.set("k", "v");
  EXPECT_THROW(waiter.multi_get({"k"}, 1000ms), RankRefusedError);
  EXPECT_THROW(waiter.wait({"k"}, 1000ms), RankRefusedError);
  EXPECT_THROW(waiter.gather_column("row/", 2, 0, 0, 0, 1000ms), RankRefusedError);
  // Attempt 1 is another gang.
  other_attempt.set("k", "v1");
  EXPECT_EQ(other_attempt.get("k"), "v1");
  ASSERT_TRUE(eventually([&] { return server.counts().heard_refusal == 2; }));
  EXPECT_EQ(server.counts().members_unheard, 1u) << "attempt 1's client";
  EXPECT_FALSE(server.wait_until_heard(2, 300ms)) << "a member that has not heard holds rank 0's store up";
}

}  // namespace
}  // namespace weft::comm
