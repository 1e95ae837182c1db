#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kube/kube_config.h"

namespace weft::kube {
namespace {
namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("weft-kubeconfig-" + name + "-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

void write(const fs::path& p, const std::string& s) { std::ofstream(p) << s; }

const char* kTwoContexts = R"(apiVersion: v1
kind: Config
current-context: prod
clusters:
- name: c1
  cluster: {server: "https://10.1.2.3:6443/", certificate-authority-data: LS0tQ0EtLS0=}
- name: c2
  cluster: {server: "https://dev:443", insecure-skip-tls-verify: true}
users:
- name: admin
  user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}
- name: dev
  user: {token: abc123}
contexts:
- name: prod
  context: {cluster: c1, user: admin, namespace: training}
- name: dev
  context: {cluster: c2, user: dev}
)";

TEST(KubeConfig, CurrentContextWithClientCertificate) {
  ClusterConfig c = parse_kubeconfig(kTwoContexts);
  EXPECT_EQ(c.server, "https://10.1.2.3:6443");
  EXPECT_EQ(c.ca_pem, "---CA---");
  EXPECT_EQ(c.client_cert_pem, "CERT");
  EXPECT_EQ(c.client_key_pem, "KEY");
  EXPECT_TRUE(c.bearer_token.empty());
  EXPECT_FALSE(c.insecure_skip_tls_verify);
  EXPECT_EQ(c.namespace_, "training");
}

TEST(KubeConfig, NamedContextWithTokenAndInsecure) {
  ClusterConfig c = parse_kubeconfig(kTwoContexts, "dev");
  EXPECT_EQ(c.server, "https://dev:443");
  EXPECT_EQ(c.bearer_token, "abc123");
  EXPECT_TRUE(c.insecure_skip_tls_verify);
  EXPECT_EQ(c.namespace_, "default");
}

TEST(KubeConfig, FilesResolveRelativeToTheKubeconfig) {
  fs::path d = temp_dir("files");
  write(d / "ca.crt", "CA FROM FILE");
  write(d / "token", "tok\n");
  write(d / "config", R"(current-context: x
clusters: [{name: c, cluster: {server: "https://h:1", certificate-authority: ca.crt}}]
users: [{name: u, user: {tokenFile: token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
)");
  ClusterConfig c = load_kubeconfig((d / "config").string());
  EXPECT_EQ(c.ca_pem, "CA FROM FILE");
  EXPECT_EQ(c.bearer_token_file, (d / "token").string());
  fs::remove_all(d);
}

TEST(KubeConfig, ErrorsNameTheProblem) {
  auto msg = [](const std::string& yaml, const std::string& ctx = "") {
    try {
      parse_kubeconfig(yaml, ctx);
    } catch (const KubeConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg(kTwoContexts, "staging").find("context 'staging' not found"), std::string::npos);
  EXPECT_NE(msg("clusters: []").find("no current-context"), std::string::npos);
  EXPECT_NE(msg("current-context: a\ncontexts: [{name: a, context: {cluster: nope}}]").find("cluster 'nope' not found"),
            std::string::npos);
  EXPECT_NE(msg("current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
                "clusters: [{name: c, cluster: {server: 'https://x'}}]\n"
                "users: [{name: u, user: {client-certificate-data: Q0VSVA==}}]")
                .find("without a key"),
            std::string::npos);
  EXPECT_NE(msg("{{{").find("invalid YAML"), std::string::npos);
}

TEST(KubeConfig, InCluster) {
  fs::path d = temp_dir("sa");
  write(d / "token", "sa-token");
  write(d / "ca.crt", "SA CA");
  write(d / "namespace", "weft-system");
  ::setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  ClusterConfig c = in_cluster_config(d.string());
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
  EXPECT_EQ(c.server, "https://10.0.0.1:443");
  EXPECT_EQ(c.bearer_token, "sa-token");
  EXPECT_EQ(c.ca_pem, "SA CA");
  EXPECT_EQ(c.namespace_, "weft-system");
  EXPECT_THROW(in_cluster_config(d.string()), KubeConfigError);  // host unset now
  fs::remove_all(d);
}

}  // namespace
}  // namespace weft::kube
