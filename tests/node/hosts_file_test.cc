// Hosts files answer what cluster DNS would: pod hostnames under their
// headless Service, Service names, search-domain short forms; terminating,
// finished and IP-less pods are left out.
#include <gtest/gtest.h>

#include "node/hosts_file.h"
#include "node/ip_pool.h"

namespace weft::node {
namespace {

std::shared_ptr<const Json> pod(const std::string& name, const std::string& ns, const std::string& ip,
                                const std::string& phase = "Running", bool terminating = false) {
  Json p = {{"metadata", {{"name", name}, {"namespace", ns}, {"labels", {{"weft.dev/job", "job"}}}}},
            {"spec", {{"hostname", name}, {"subdomain", "job"}}},
            {"status", {{"phase", phase}, {"podIP", ip}}}};
  if (terminating) p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  return std::make_shared<const Json>(p);
}

std::shared_ptr<const Json> headless(const std::string& name, const std::string& ns) {
  return std::make_shared<const Json>(Json{
      {"metadata", {{"name", name}, {"namespace", ns}}},
      {"spec", {{"clusterIP", "None"}, {"publishNotReadyAddresses", true}, {"selector", {{"weft.dev/job", "job"}}}}}});
}

bool has_line(const std::string& hosts, const std::string& ip, const std::string& name) {
  size_t pos = 0;
  while ((pos = hosts.find(ip + "\t", pos)) != std::string::npos) {
    if (pos != 0 && hosts[pos - 1] != '\n') { ++pos; continue; }
    const std::string line = hosts.substr(pos, hosts.find('\n', pos) - pos);
    if ((" " + line.substr(ip.size() + 1) + " ").find(" " + name + " ") != std::string::npos) return true;
    ++pos;
  }
  return false;
}

TEST(HostsFile, PodAndServiceNamesResolveLikeClusterDns) {
  auto self = pod("job-1", "ns", "127.1.0.2");
  HostsInput in{self.get(), "127.1.0.2",
                {pod("job-0", "ns", "127.1.0.1"), self, pod("old-0", "ns", "127.1.0.9", "Running", true),
                 pod("done-0", "ns", "127.1.0.8", "Succeeded"), pod("new-0", "ns", ""),
                 pod("job-0", "other", "127.1.0.5")},
                {headless("job", "ns"), std::make_shared<const Json>(Json{
                                            {"metadata", {{"name", "api"}, {"namespace", "ns"}}},
                                            {"spec", {{"clusterIP", "10.0.0.7"}}}})}};
  const std::string h = render_hosts(in);
  EXPECT_TRUE(has_line(h, "127.0.0.1", "localhost")) << h;
  EXPECT_TRUE(has_line(h, "127.1.0.2", "job-1")) << h;
  EXPECT_TRUE(has_line(h, "127.1.0.2", "job-1.job.ns.svc.cluster.local")) << h;
  EXPECT_TRUE(has_line(h, "127.1.0.1", "job-0.job.ns.svc")) << h;
  EXPECT_TRUE(has_line(h, "127.1.0.1", "job-0.job.ns.svc.cluster.local")) << h;
  EXPECT_TRUE(has_line(h, "127.1.0.1", "job-0.job")) << h;
  EXPECT_TRUE(has_line(h, "127.1.0.1", "job.ns.svc")) << h;
  EXPECT_TRUE(has_line(h, "127.1.0.1", "job")) << h;
  EXPECT_TRUE(has_line(h, "10.0.0.7", "api.ns.svc.cluster.local")) << h;
  EXPECT_TRUE(has_line(h, "10.0.0.7", "api")) << h;
  EXPECT_EQ(h.find("127.1.0.9"), std::string::npos) << "terminating pod listed:\n" << h;
  EXPECT_EQ(h.find("127.1.0.8"), std::string::npos) << "finished pod listed:\n" << h;
  EXPECT_EQ(h.find("127.1.0.5"), std::string::npos) << "pod of another namespace's service listed:\n" << h;
  EXPECT_EQ(h, render_hosts(in)) << "not deterministic";
}

TEST(HostsFile, NotReadyPodsNeedPublishNotReadyAddresses) {
  auto self = pod("job-1", "ns", "127.1.0.2");
  Json svc = *headless("job", "ns");
  svc["spec"]["publishNotReadyAddresses"] = false;
  HostsInput in{self.get(), "127.1.0.2", {pod("job-0", "ns", "127.1.0.1")}, {std::make_shared<const Json>(svc)}};
  EXPECT_EQ(render_hosts(in).find("job-0.job.ns.svc"), std::string::npos);
}

// The agent writes a pod's status as it starts the container and its cache
// sees it back later: the pod's own Service names must resolve from the
// first file on, to the address the agent gave it (a pod that looked itself
// up at once failed on a busy host: node_kube RunsPodsWithEnvVolumesAndClusterNames).
TEST(HostsFile, APodFindsItsOwnServiceNamesBeforeItsStatusIsBack) {
  Json cached = *pod("job-1", "ns", "");
  cached.erase("status");  // as created: no phase, no IP yet
  HostsInput in{&cached,
                "127.1.0.2",
                {pod("job-0", "ns", "127.1.0.1"), std::make_shared<const Json>(cached)},
                {headless("job", "ns")}};
  const std::string h = render_hosts(in);
  EXPECT_TRUE(has_line(h, "127.1.0.2", "job-1.job.ns.svc")) << h;
  EXPECT_TRUE(has_line(h, "127.1.0.2", "job-1.job.ns.svc.cluster.local")) << h;
  EXPECT_TRUE(has_line(h, "127.1.0.2", "job-1.job")) << h;
  EXPECT_TRUE(has_line(h, "127.1.0.2", "job.ns.svc")) << h;
  EXPECT_TRUE(has_line(h, "127.1.0.1", "job-0.job.ns.svc")) << h;
  // A cached status with another (stale) address does not win over the
  // agent's; a finished pod is not served.
  Json stale = *pod("job-1", "ns", "127.1.0.99");
  in.pod = &stale;
  EXPECT_EQ(render_hosts(in).find("127.1.0.99"), std::string::npos) << render_hosts(in);
  Json done = *pod("job-1", "ns", "127.1.0.2", "Failed");
  in.pod = &done;
  EXPECT_FALSE(has_line(render_hosts(in), "127.1.0.2", "job-1.job.ns.svc")) << render_hosts(in);
}

TEST(IpPool, HandsOutDistinctLoopbackAddressesRoundRobin) {
  IpPool pool(1);
  auto a = pool.allocate(), b = pool.allocate();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, "127.1.0.1");
  EXPECT_EQ(*b, "127.1.0.2");
  pool.release(*a);
  EXPECT_EQ(*pool.allocate(), "127.1.0.3") << "a released address is not reused at once";
  IpPool adopted(1);
  EXPECT_TRUE(adopted.reserve("127.1.0.7"));
  EXPECT_FALSE(adopted.reserve("127.2.0.7"));
  EXPECT_EQ(*adopted.allocate(), "127.1.0.8");
  EXPECT_EQ(adopted.in_use(), 2u);
}

}  // namespace
}  // namespace weft::node
