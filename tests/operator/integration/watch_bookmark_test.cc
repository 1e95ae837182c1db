// Watch bookmarks against the real API server. The operator's informers
// watch its children through one label, so writes to the cluster's other
// objects of the same kind never reach them; without bookmarks a quiet
// informer's resourceVersion stays where its last matching event left it,
// and a re-watch after the API server's watch cache has moved past that
// version costs a 410 and a full relist. With bookmarks the server tells the
// informer how far it has got, shortly before each stream's timeoutSeconds
// ends (and about every minute), and the next watch starts from there.
#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "integration/harness.h"
#include "kube/kube_config.h"

namespace weft::it {
namespace {

// resourceVersions are opaque to clients; an etcd-backed API server's are
// etcd revisions, which this test compares to tell "after those writes".
long long revision(const std::string& rv) { return rv.empty() ? -1 : std::atoll(rv.c_str()); }

Json configmap(const std::string& name, bool watched) {
  Json cm = {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", name}}}, {"data", {{"k", "v"}}}};
  if (watched) cm["metadata"]["labels"] = {{"weft.dev/bookmark-test", "watched"}};
  return cm;
}

TEST(WatchBookmarks, QuietInformerResumesPastUnrelatedWritesWithoutRelisting) {
  TestNamespace ns("it-bookmarks");
  ASSERT_TRUE(admin_api().create(kube::kConfigMaps, ns.name(), configmap("watched", true)).ok());

  kube::KubeApi api(kube::load_kubeconfig(kubeconfig_path()));
  kube::Informer inf(api, kube::kConfigMaps, ns.name(), "weft.dev/bookmark-test=watched", std::chrono::seconds(0));
  // Streams of 10 to 14 s: the server sends its bookmark 2 s before one
  // ends. (Streams of 4-5 s got none in 79 s on a fresh-clone CI run beside
  // the e2e tests, the API server starved of CPU around those 2 s.)
  inf.set_watch_timeout(std::chrono::seconds(10));
  std::atomic<int> handled{0};
  inf.add_handler([&](const Json&) { ++handled; });
  std::jthread run([&](std::stop_token st) { inf.run(st); });
  ASSERT_TRUE(eventually([&] { return inf.synced() && handled.load() == 1; })) << "the watched ConfigMap";
  const long long listed = revision(inf.last_resource_version());

  // Writes the informer's selector leaves out, of the kind it watches.
  long long last_write = 0;
  for (int i = 0; i < 5; ++i) {
    auto r = admin_api().create(kube::kConfigMaps, ns.name(), configmap("other-" + std::to_string(i), false));
    ASSERT_TRUE(r.ok()) << r.error().message;
    last_write = std::max(last_write, revision((*r)["metadata"].value("resourceVersion", "")));
  }
  ASSERT_GT(last_write, listed);

  // A later watch starts from a version past those writes: only a bookmark
  // can have brought it, since no event matched and nothing was relisted.
  EXPECT_TRUE(eventually([&] { return revision(inf.watch_resource_version()) >= last_write; }, 150s))
      << "watches started from " << inf.watch_resource_version() << " (last unrelated write " << last_write
      << "), bookmarks " << inf.bookmarks() << ", watches " << inf.watches();
  EXPECT_GE(inf.bookmarks(), 1);
  EXPECT_GE(inf.watches(), 2);
  EXPECT_EQ(inf.relists(), 1);
  EXPECT_EQ(api.request_counts()["list"], 1);
  // Bookmarks changed neither the cache nor the handlers' view.
  EXPECT_EQ(handled.load(), 1);
  EXPECT_EQ(inf.size(), 1u);
  EXPECT_NE(inf.get(ns.name(), "watched"), nullptr);
  EXPECT_EQ(inf.get(ns.name(), "other-0"), nullptr);
}

}  // namespace
}  // namespace weft::it
