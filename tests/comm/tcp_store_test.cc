// The rendezvous store with threads as clients (the store is plain TCP; the
// multi-process rendezvous is covered in rendezvous_test.cc).
#include "comm/tcp_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "support/net.h"

namespace weft::comm {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

StoreOptions opts(uint16_t port, std::string token = "t", int attempt = 0,
                  std::chrono::milliseconds timeout = 5000ms) {
  StoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.token = std::move(token);
  o.attempt = attempt;
  o.timeout = timeout;
  return o;
}

TEST(TcpStore, SetGetAddWait) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  TcpStore a(opts(server.port())), b(opts(server.port()));
  a.set("k", std::string("v\0w", 3));
  EXPECT_EQ(b.get("k"), std::string("v\0w", 3));
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(b.add("n", 5), 7);
  EXPECT_EQ(a.get("n"), "7");
  b.wait({"k", "n"}, 100ms);
  EXPECT_EQ(a.local_address(), "127.0.0.1");
}

TEST(TcpStore, GetWaitsForALaterSet) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  TcpStore a(opts(server.port())), b(opts(server.port()));
  std::thread writer([&] {
    std::this_thread::sleep_for(200ms);
    a.set("late", "x");
  });
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(b.get("late"), "x");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 150ms);
  writer.join();
}

TEST(TcpStore, ConcurrentAddsAreAtomic) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([&] {
      TcpStore c(opts(server.port()));
      for (int k = 0; k < 50; ++k) c.add("ctr", 1);
    });
  for (auto& t : ts) t.join();
  TcpStore c(opts(server.port()));
  EXPECT_EQ(c.add("ctr", 0), 200);
}

TEST(TcpStore, WaitTimesOutNamingTheKey) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  TcpStore a(opts(server.port()));
  a.set("here", "1");
  try {
    a.wait({"here", "missing"}, 100ms);
    FAIL() << "wait should time out";
  } catch (const RendezvousError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'missing'"));
  }
  EXPECT_THROW(a.get("missing", 50ms), RendezvousError);
}

TEST(TcpStore, MultiGetWaitsForEveryKeyAndAnswersInOrder) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  TcpStore a(opts(server.port())), b(opts(server.port()));
  a.set("k1", "one");
  std::thread writer([&] {
    std::this_thread::sleep_for(100ms);
    a.set("k3", std::string("th\0ree", 6));
    std::this_thread::sleep_for(100ms);
    a.set("k2", "");
  });
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THAT(b.multi_get({"k3", "k1", "k2"}, 5000ms),
              ::testing::ElementsAre(std::string("th\0ree", 6), "one", ""));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 150ms);
  writer.join();
  EXPECT_THAT(b.multi_get({}, 10ms), ::testing::IsEmpty());
}

TEST(TcpStore, MultiGetTimesOutNamingAMissingKey) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  TcpStore a(opts(server.port()));
  a.set("here", "1");
  try {
    a.multi_get({"here", "absent"}, 100ms);
    FAIL() << "multi_get should time out";
  } catch (const RendezvousError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'absent'"));
  }
  // The connection is still usable after a timed-out request.
  EXPECT_EQ(a.multi_get({"here"}, 100ms), std::vector<std::string>{"1"});
}

// Many parked requests on different keys, each completed by its own set (and
// one whose client leaves while parked): every one gets its own value.
TEST(TcpStore, ManyParkedRequestsAreAnsweredByTheirOwnKeys) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  constexpr int kRanks = 32;
  {
    TcpStore leaver(opts(server.port()));
    std::thread t([&] {
      try {
        leaver.get("never", 200ms);
      } catch (const RendezvousError&) {
      }
    });
    t.join();
  }
  std::vector<std::thread> ts;
  std::atomic<int> right{0};
  for (int r = 0; r < kRanks; ++r)
    ts.emplace_back([&, r] {
      TcpStore c(opts(server.port()));
      c.set("rank/" + std::to_string(r), std::to_string(r));
      std::vector<std::string> keys;
      for (int i = kRanks - 1; i >= 0; --i) keys.push_back("rank/" + std::to_string(i));
      auto v = c.multi_get(keys, 5000ms);
      bool ok = v.size() == size_t(kRanks);
      for (int i = 0; ok && i < kRanks; ++i) ok = v[i] == std::to_string(kRanks - 1 - i);
      right += ok;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(right.load(), kRanks);
}

// Three rows of a matrix: a 2-byte head, then one 1-byte cell per other rank.
TEST(TcpStore, GatherColumnReturnsEachRowsHeadAndTheCellForSelf) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  TcpStore a(opts(server.port())), b(opts(server.port()));
  a.set("m/0", "h0" "12");  // cells for ranks 1, 2
  std::thread writer([&] {
    std::this_thread::sleep_for(100ms);
    a.set("m/2", "h2" "01");  // cells for ranks 0, 1
  });
  // Rank 1 waits for rows 0 and 2 (not its own) and reads its cells.
  EXPECT_THAT(b.gather_column("m/", 3, 1, 2, 1, 5000ms), ::testing::ElementsAre("h01", "h21"));
  writer.join();
  EXPECT_THROW(b.gather_column("m/", 3, 2, 2, 1, 100ms), RendezvousError);  // row 1 is missing
}

TEST(TcpStore, AttemptsDoNotSeeEachOthersKeys) {
  TcpStoreServer server("127.0.0.1", 0, "t");
  TcpStore a0(opts(server.port(), "t", 0)), a1(opts(server.port(), "t", 1));
  a0.set("id", "zero");
  a1.set("id", "one");
  EXPECT_EQ(a0.get("id"), "zero");
  EXPECT_EQ(a1.get("id"), "one");
}

TEST(TcpStore, WrongTokenIsRejectedWithAClearError) {
  TcpStoreServer server("127.0.0.1", 0, "secret");
  auto t0 = std::chrono::steady_clock::now();
  try {
    TcpStore c(opts(server.port(), "guess"));
    FAIL() << "a wrong token must be rejected";
  } catch (const RendezvousError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rejected this rank's token"));
    EXPECT_THAT(e.what(), HasSubstr("WEFT_RDZV_TOKEN"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "a token mismatch must not be retried";
}

TEST(TcpStore, ClientRetriesUntilTheServerComesUp) {
  int port = weft::testing::free_port();
  std::unique_ptr<TcpStoreServer> server;
  std::thread late([&] {
    std::this_thread::sleep_for(400ms);
    server = std::make_unique<TcpStoreServer>("127.0.0.1", static_cast<uint16_t>(port), "t");
  });
  TcpStore c(opts(static_cast<uint16_t>(port)));
  late.join();
  c.set("a", "b");
  EXPECT_EQ(c.get("a"), "b");
}

TEST(TcpStore, GivesUpAfterTheRendezvousTimeoutNamingTheAddress) {
  int port = weft::testing::free_port();
  auto t0 = std::chrono::steady_clock::now();
  try {
    TcpStore c(opts(static_cast<uint16_t>(port), "t", 0, 300ms));
    FAIL();
  } catch (const RendezvousError& e) {
    EXPECT_THAT(e.what(), HasSubstr("127.0.0.1:" + std::to_string(port)));
    EXPECT_THAT(e.what(), HasSubstr("MASTER_ADDR:MASTER_PORT"));
  }
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
}

TEST(TcpStore, RetriesNameResolution) {
  StoreOptions o = opts(1, "t", 0, 300ms);
  o.host = "no-such-host.invalid";
  try {
    TcpStore c(o);
    FAIL();
  } catch (const RendezvousError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot resolve no-such-host.invalid"));
  }
}

TEST(TcpStore, ServerReportsAPortInUse) {
  TcpStoreServer a("127.0.0.1", 0, "t");
  try {
    TcpStoreServer b("127.0.0.1", a.port(), "t");
    FAIL();
  } catch (const RendezvousError& e) {
    EXPECT_THAT(e.what(), HasSubstr("MASTER_PORT"));
  }
}

}  // namespace
}  // namespace weft::comm
