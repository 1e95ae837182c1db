// Wire-level KubeApi behaviour against a scripted HTTP server: chunk
// boundaries in watch streams, malformed JSON, 429/5xx retries, pagination.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "fake_http_server.h"
#include "kube/informer.h"
#include "kube/kube_api.h"

namespace weft::kube {
namespace {
using testing::FakeHttpServer;
using testing::FakeRequest;
using testing::FakeResponse;
using namespace std::chrono_literals;

KubeApi make_api(const FakeHttpServer& s, int retries = 3) {
  ClusterConfig c;
  c.server = s.url();
  c.bearer_token = "tok";
  ApiOptions o;
  o.max_retries = retries;
  o.retry_base = 1ms;
  o.timeout = 5000ms;
  return KubeApi(c, o);
}

TEST(KubeApiWire, GetSendsPathAndTokenAndParsesBody) {
  FakeHttpServer s([](const FakeRequest&) { return FakeResponse{200, {}, R"({"metadata":{"name":"p"}})"}; });
  auto api = make_api(s);
  auto r = api.get(kPods, "ns1", "p");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)["metadata"]["name"], "p");
  auto reqs = s.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].target, "/api/v1/namespaces/ns1/pods/p");
  bool auth = false;
  for (auto h : reqs[0].header_lines) {
    for (size_t i = 0; i < h.find(':') && i < h.size(); ++i) h[i] = static_cast<char>(std::tolower(h[i]));
    auth |= h == "authorization:Bearer tok" || h == "authorization: Bearer tok";
  }
  EXPECT_TRUE(auth) << ::testing::PrintToString(reqs[0].header_lines);
}

TEST(KubeApiWire, RetriesThrottlingAndServerErrorsThenSucceeds) {
  std::atomic<int> n{0};
  FakeHttpServer s([&](const FakeRequest&) {
    int i = n++;
    if (i == 0) return FakeResponse{429, {{"Retry-After", "0"}}, R"({"reason":"TooManyRequests"})"};
    if (i == 1) return FakeResponse{503, {}, "upstream down"};
    return FakeResponse{201, {}, R"({"ok":true})"};
  });
  auto api = make_api(s);
  auto r = api.create(kConfigMaps, "ns", {{"metadata", {{"name", "x"}}}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(n.load(), 3);
  EXPECT_EQ(api.request_counts().at("create"), 3);
}

TEST(KubeApiWire, GivesUpAfterMaxRetriesWithTheLastError) {
  std::atomic<int> n{0};
  FakeHttpServer s([&](const FakeRequest&) {
    ++n;
    return FakeResponse{500, {}, R"({"kind":"Status","reason":"InternalError","message":"etcd down"})"};
  });
  auto api = make_api(s, 2);
  auto r = api.get(kPods, "ns", "p");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status, 500);
  EXPECT_TRUE(r.error().transient());
  EXPECT_NE(r.error().message.find("etcd down"), std::string::npos);
  EXPECT_EQ(n.load(), 3);
}

TEST(KubeApiWire, ClientErrorsAreNotRetriedAndClassified) {
  std::atomic<int> n{0};
  FakeHttpServer s([&](const FakeRequest& req) {
    ++n;
    if (req.method == "DELETE") return FakeResponse{404, {}, R"({"reason":"NotFound","message":"pods \"p\" not found"})"};
    if (req.method == "PUT") return FakeResponse{409, {}, R"({"reason":"Conflict","message":"modified"})"};
    return FakeResponse{409, {}, R"({"reason":"AlreadyExists","message":"exists"})"};
  });
  auto api = make_api(s);
  auto del = api.remove(kPods, "ns", "p");
  EXPECT_TRUE(del.error().not_found());
  auto upd = api.update(kPods, "ns", {{"metadata", {{"name", "p"}, {"resourceVersion", "1"}}}});
  EXPECT_TRUE(upd.error().conflict());
  EXPECT_TRUE(upd.error().transient());
  auto cr = api.create(kPods, "ns", {{"metadata", {{"name", "p"}}}});
  EXPECT_TRUE(cr.error().already_exists());
  EXPECT_FALSE(cr.error().transient());
  EXPECT_EQ(n.load(), 3);
}

TEST(KubeApiWire, MalformedJsonIsAnErrorNotACrash) {
  FakeHttpServer s([](const FakeRequest&) { return FakeResponse{200, {}, R"({"items": [1, 2)"}; });
  auto api = make_api(s);
  auto r = api.get(kPods, "ns", "p");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason, "MalformedResponse");
}

TEST(KubeApiWire, ListFollowsContinueTokens) {
  FakeHttpServer s([](const FakeRequest& req) {
    if (req.target.find("continue=page2") == std::string::npos)
      return FakeResponse{200, {}, R"({"metadata":{"continue":"page2","resourceVersion":"10"},"items":[{"metadata":{"name":"a"}}]})"};
    return FakeResponse{200, {}, R"({"metadata":{"resourceVersion":"11"},"items":[{"metadata":{"name":"b"}}]})"};
  });
  auto api = make_api(s);
  ListOptions o;
  o.limit = 1;
  o.label_selector = "weft.dev/job=x";
  auto r = api.list(kPods, "ns", o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->items.size(), 2u);
  EXPECT_EQ(r->items[1]["metadata"]["name"], "b");
  EXPECT_EQ(r->items[1]["kind"], "Pod");
  EXPECT_EQ(r->resource_version, "11");
  auto reqs = s.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_NE(reqs[0].target.find("labelSelector=weft.dev%2Fjob%3Dx"), std::string::npos) << reqs[0].target;
  EXPECT_NE(reqs[1].target.find("continue=page2"), std::string::npos);
}

TEST(KubeApiWire, WatchEventsSurviveArbitraryChunkBoundaries) {
  const std::string e1 = R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5"}}})";
  const std::string e2 = R"({"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"6"}}})";
  const std::string bm = R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}})";
  const std::string all = e1 + "\n" + e2 + "\n" + bm + "\n";
  FakeHttpServer s([&](const FakeRequest&) {
    FakeResponse r;
    // Split inside the first event, then two events' worth in one chunk.
    r.chunks = {all.substr(0, 7), all.substr(7, 30), all.substr(37, e1.size() + e2.size() - 30), all.substr(e1.size() + e2.size() + 7)};
    return r;
  });
  auto api = make_api(s);
  std::vector<WatchEvent> got;
  std::stop_source stop;
  auto r = api.watch(kPods, "ns", {"4", "", 60, true}, [&](const WatchEvent& e) { got.push_back(e); }, stop.get_token());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(*r);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].type, "ADDED");
  EXPECT_EQ(got[1].object["metadata"]["resourceVersion"], "6");
  EXPECT_EQ(got[2].type, "BOOKMARK");
  EXPECT_EQ(got[2].object["metadata"]["resourceVersion"], "9");
  auto target = s.requests()[0].target;
  EXPECT_NE(target.find("watch=1"), std::string::npos);
  EXPECT_NE(target.find("resourceVersion=4"), std::string::npos);
  EXPECT_NE(target.find("allowWatchBookmarks=true"), std::string::npos);
}

TEST(KubeApiWire, WatchReportsGoneAndMalformedEvents) {
  FakeHttpServer gone([](const FakeRequest&) {
    FakeResponse r;
    r.chunks = {R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version"}})" "\n"};
    return r;
  });
  auto api = make_api(gone);
  std::stop_source stop;
  auto r = api.watch(kPods, "ns", {"1", "", 60, true}, [](const WatchEvent&) {}, stop.get_token());
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().gone());

  FakeHttpServer bad([](const FakeRequest&) {
    FakeResponse r;
    r.chunks = {"{\"type\":\"ADDED\",\"object\":{}}\n", "not json at all\n"};
    return r;
  });
  auto api2 = make_api(bad);
  int events = 0;
  auto r2 = api2.watch(kPods, "ns", {"1", "", 60, true}, [&](const WatchEvent&) { ++events; }, stop.get_token());
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.error().reason, "MalformedWatchEvent");
  EXPECT_EQ(events, 1);
}

TEST(KubeApiWire, WatchStopsPromptlyOnRequest) {
  FakeHttpServer s([](const FakeRequest&) {
    FakeResponse r;
    r.chunks = {R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5"}}})" "\n"};
    r.hold_open = true;
    return r;
  });
  auto api = make_api(s);
  std::stop_source stop;
  std::atomic<int> events{0};
  auto t0 = std::chrono::steady_clock::now();
  std::thread stopper([&] {
    while (events.load() == 0) std::this_thread::sleep_for(5ms);
    stop.request_stop();
  });
  auto r = api.watch(kPods, "ns", {"1", "", 60, true}, [&](const WatchEvent&) { ++events; }, stop.get_token());
  stopper.join();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(*r);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(KubeApiWire, QpsLimitSpacesRequests) {
  FakeHttpServer s([](const FakeRequest&) { return FakeResponse{200, {}, "{}"}; });
  ClusterConfig c;
  c.server = s.url();
  ApiOptions o;
  o.qps = 20;
  o.burst = 1;
  KubeApi api(c, o);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(api.get(kPods, "ns", "p").ok());
  // 1 from the burst, then 5 at 20/s = 250 ms at least.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 240ms);
}

}  // namespace
}  // namespace weft::kube

namespace weft::kube {
namespace {

TEST(InformerWire, RelistsAfterGoneAndReportsObjectsDeletedMeanwhile) {
  std::atomic<int> lists{0}, watches{0};
  FakeHttpServer s([&](const FakeRequest& req) {
    if (req.target.find("watch=1") == std::string::npos) {
      int i = lists++;
      if (i == 0)
        return FakeResponse{200, {}, R"({"metadata":{"resourceVersion":"10"},"items":[{"metadata":{"name":"a","namespace":"n","resourceVersion":"9"}}]})"};
      return FakeResponse{200, {}, R"({"metadata":{"resourceVersion":"20"},"items":[{"metadata":{"name":"b","namespace":"n","resourceVersion":"19"}}]})"};
    }
    FakeResponse r;
    if (watches++ == 0) {
      EXPECT_NE(req.target.find("resourceVersion=10"), std::string::npos) << req.target;
      r.chunks = {R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}})" "\n"};
    } else {
      EXPECT_NE(req.target.find("resourceVersion=20"), std::string::npos) << req.target;
      r.chunks = {R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"25"}}})" "\n"};
      r.hold_open = true;
    }
    return r;
  });
  ClusterConfig c;
  c.server = s.url();
  KubeApi api(c);
  Informer inf(api, kPods, "n", "", std::chrono::seconds(0));
  std::mutex mu;
  std::vector<std::string> seen;
  inf.add_handler([&](const Json& o) {
    std::lock_guard lock(mu);
    seen.push_back(o["metadata"]["name"]);
  });
  std::jthread t([&](std::stop_token st) { inf.run(st); });
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (inf.last_resource_version() != "25" && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  t.request_stop();
  t.join();
  EXPECT_EQ(inf.relists(), 2);
  EXPECT_EQ(inf.last_resource_version(), "25");
  EXPECT_EQ(inf.get("n", "a"), nullptr);
  ASSERT_NE(inf.get("n", "b"), nullptr);
  std::lock_guard lock(mu);
  // a (listed), then a again (deleted while the watch was gone) and b (new).
  EXPECT_EQ(std::count(seen.begin(), seen.end(), "a"), 2);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), "b"), 1);
}

// A BOOKMARK is a newer resourceVersion and nothing else: the cache and the
// handlers do not see it, and the next watch starts from it (no relist).
TEST(InformerWire, BookmarkAdvancesResourceVersionWithoutAnObjectChange) {
  std::atomic<int> lists{0}, watches{0};
  std::mutex tmu;
  std::vector<std::string> watch_targets;
  FakeHttpServer s([&](const FakeRequest& req) {
    if (req.target.find("watch=1") == std::string::npos) {
      ++lists;
      return FakeResponse{200, {}, R"({"metadata":{"resourceVersion":"10"},"items":[{"metadata":{"name":"a","namespace":"n","resourceVersion":"9"}}]})"};
    }
    {
      std::lock_guard lock(tmu);
      watch_targets.push_back(req.target);
    }
    FakeResponse r;
    if (watches++ == 0) {
      // The stream ends (its timeoutSeconds) right after a bookmark.
      r.chunks = {R"({"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"30"}}})" "\n"};
    } else {
      // One without metadata changes nothing; a later one still counts.
      r.chunks = {R"({"type":"BOOKMARK","object":{}})" "\n",
                  R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"31"}}})" "\n"};
      r.hold_open = true;
    }
    return r;
  });
  ClusterConfig c;
  c.server = s.url();
  KubeApi api(c);
  Informer inf(api, kPods, "n", "app=x", std::chrono::seconds(0));
  inf.set_watch_timeout(std::chrono::seconds(2));
  std::atomic<int> handled{0};
  inf.add_handler([&](const Json&) { ++handled; });
  std::jthread t([&](std::stop_token st) { inf.run(st); });
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (inf.last_resource_version() != "31" && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  const ObjectPtr a = inf.get("n", "a");
  t.request_stop();
  t.join();
  EXPECT_EQ(inf.last_resource_version(), "31");
  EXPECT_EQ(inf.watch_resource_version(), "30");
  EXPECT_EQ(inf.bookmarks(), 3);
  EXPECT_EQ(inf.relists(), 1);
  EXPECT_EQ(lists.load(), 1);
  EXPECT_EQ(handled.load(), 1) << "only the listed object reaches the handlers";
  EXPECT_EQ(inf.size(), 1u);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ((*a)["metadata"]["resourceVersion"], "9");
  std::lock_guard lock(tmu);
  ASSERT_GE(watch_targets.size(), 2u);
  for (const auto& target : watch_targets) {
    EXPECT_NE(target.find("allowWatchBookmarks=true"), std::string::npos) << target;
    EXPECT_NE(target.find("timeoutSeconds=2&"), std::string::npos) << target;
  }
  EXPECT_NE(watch_targets[0].find("resourceVersion=10"), std::string::npos) << watch_targets[0];
  EXPECT_NE(watch_targets[1].find("resourceVersion=30"), std::string::npos) << watch_targets[1];
}

}  // namespace
}  // namespace weft::kube
