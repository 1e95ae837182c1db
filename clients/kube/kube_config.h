// ClusterConfig: where the API server is and how to authenticate, loaded from
// a kubeconfig (current context) or from the in-cluster service account.
// Invariant: at most one of bearer_token and client certificate is used;
// CA material is PEM text (file contents are read at load time, so a config
// never refers to files later). insecure_skip_tls_verify is only ever true
// when the kubeconfig itself says so.
#pragma once

#include <stdexcept>
#include <string>

namespace weft::kube {

struct KubeConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ClusterConfig {
  std::string server;              // https://host:port (no trailing slash)
  std::string ca_pem;              // empty = system trust store
  std::string client_cert_pem;     // client certificate auth
  std::string client_key_pem;
  std::string bearer_token;        // token auth
  std::string bearer_token_file;   // re-read on every request when set (rotated SA tokens)
  bool insecure_skip_tls_verify = false;
  std::string namespace_;          // context namespace, "default" when unset
};

// Parses kubeconfig YAML text. `context` empty = current-context. Relative
// file paths are resolved against `base_dir`. Throws KubeConfigError naming
// the missing or malformed entry.
ClusterConfig parse_kubeconfig(const std::string& yaml_text, const std::string& context = "",
                               const std::string& base_dir = ".");
ClusterConfig load_kubeconfig(const std::string& path, const std::string& context = "");

// In-cluster: KUBERNETES_SERVICE_HOST/PORT, the service-account token and CA
// under `sa_dir` (default /var/run/secrets/kubernetes.io/serviceaccount).
ClusterConfig in_cluster_config(const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// The usual order: explicit path, else $KUBECONFIG, else in-cluster when
// KUBERNETES_SERVICE_HOST is set, else ~/.kube/config.
ClusterConfig load_default_config(const std::string& explicit_path = "");

}  // namespace weft::kube
