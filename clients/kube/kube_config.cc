#include "kube/kube_config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <optional>

#include "kube/base64.h"
#include "small_file.h"

namespace weft::kube {
namespace {

// Regular files of bounded size only (small_file.h): a kubeconfig path that
// names a FIFO would block the start where SIGTERM cannot end it, and
// /dev/zero would grow the process without bound.
std::string read_file(const std::string& path, const std::string& what) {
  SmallFile f = read_small_file(path, kMaxTextFileBytes);
  if (f.status == SmallFile::Status::Missing) throw KubeConfigError(what + ": cannot read file " + path + " (missing)");
  if (!f.ok()) throw KubeConfigError(what + ": " + f.problem);
  return std::move(f.text);
}

std::string decode_data(const std::string& in, const std::string& what) {
  std::optional<std::string> bytes = base64_decode(in);
  if (!bytes) throw KubeConfigError(what + ": invalid base64 data");
  return std::move(*bytes);
}

std::string resolve(const std::string& path, const std::string& base_dir) {
  std::filesystem::path p(path);
  return p.is_absolute() ? path : (std::filesystem::path(base_dir) / p).string();
}

// Inline "-data" (base64) wins over the file form, as in client-go.
std::string pem_field(const YAML::Node& node, const std::string& key, const std::string& base_dir,
                      const std::string& where) {
  if (node[key + "-data"]) return decode_data(node[key + "-data"].as<std::string>(), where + "." + key + "-data");
  if (node[key]) return read_file(resolve(node[key].as<std::string>(), base_dir), where + "." + key);
  return "";
}

YAML::Node find_named(const YAML::Node& list, const std::string& name, const std::string& kind) {
  if (list && list.IsSequence()) {
    for (const auto& e : list)
      if (e["name"] && e["name"].as<std::string>() == name) return e;
  }
  throw KubeConfigError("kubeconfig: " + kind + " '" + name + "' not found");
}

}  // namespace

ClusterConfig parse_kubeconfig(const std::string& yaml_text, const std::string& context,
                               const std::string& base_dir) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw KubeConfigError(std::string("kubeconfig: invalid YAML: ") + e.what());
  }
  std::string ctx_name = context;
  if (ctx_name.empty()) {
    if (!root["current-context"] || root["current-context"].as<std::string>().empty())
      throw KubeConfigError("kubeconfig: no current-context set and no context given");
    ctx_name = root["current-context"].as<std::string>();
  }
  YAML::Node ctx = find_named(root["contexts"], ctx_name, "context")["context"];
  if (!ctx || !ctx["cluster"]) throw KubeConfigError("kubeconfig: context '" + ctx_name + "' names no cluster");
  const std::string cluster_name = ctx["cluster"].as<std::string>();
  YAML::Node cluster = find_named(root["clusters"], cluster_name, "cluster")["cluster"];
  if (!cluster || !cluster["server"])
    throw KubeConfigError("kubeconfig: cluster '" + cluster_name + "' has no server");

  ClusterConfig cfg;
  cfg.server = cluster["server"].as<std::string>();
  while (!cfg.server.empty() && cfg.server.back() == '/') cfg.server.pop_back();
  const std::string cwhere = "cluster '" + cluster_name + "'";
  cfg.ca_pem = pem_field(cluster, "certificate-authority", base_dir, cwhere);
  cfg.insecure_skip_tls_verify = cluster["insecure-skip-tls-verify"] && cluster["insecure-skip-tls-verify"].as<bool>();
  cfg.namespace_ = ctx["namespace"] ? ctx["namespace"].as<std::string>() : "default";

  if (ctx["user"]) {
    const std::string user_name = ctx["user"].as<std::string>();
    YAML::Node user = find_named(root["users"], user_name, "user")["user"];
    const std::string uwhere = "user '" + user_name + "'";
    if (user) {
      if (user["token"]) cfg.bearer_token = user["token"].as<std::string>();
      if (user["tokenFile"]) {
        cfg.bearer_token_file = resolve(user["tokenFile"].as<std::string>(), base_dir);
        // Read now so that a bad path is refused at start; re-read later
        // (KubeApi) to follow rotation.
        if (!cfg.bearer_token_file.empty()) {
          std::string t = read_file(cfg.bearer_token_file, uwhere + ".tokenFile");
          while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
          if (!t.empty()) cfg.bearer_token = t;
        }
      }
      cfg.client_cert_pem = pem_field(user, "client-certificate", base_dir, uwhere);
      cfg.client_key_pem = pem_field(user, "client-key", base_dir, uwhere);
      if (cfg.client_cert_pem.empty() != cfg.client_key_pem.empty())
        throw KubeConfigError("kubeconfig: " + uwhere + " has a client certificate without a key (or the reverse)");
      if (user["exec"] || user["auth-provider"])
        throw KubeConfigError("kubeconfig: " + uwhere + " uses exec/auth-provider plugins, which weft does not support");
    }
  }
  return cfg;
}

ClusterConfig load_kubeconfig(const std::string& path, const std::string& context) {
  const std::string text = read_file(path, "kubeconfig");
  return parse_kubeconfig(text, context, std::filesystem::path(path).parent_path().string());
}

ClusterConfig in_cluster_config(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host) throw KubeConfigError("in-cluster config: KUBERNETES_SERVICE_HOST is not set");
  ClusterConfig cfg;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6 literal
  cfg.server = "https://" + h + ":" + (port && *port ? port : "443");
  cfg.bearer_token_file = sa_dir + "/token";
  cfg.bearer_token = read_file(cfg.bearer_token_file, "in-cluster service-account token");
  cfg.ca_pem = read_file(sa_dir + "/ca.crt", "in-cluster service-account CA");
  const SmallFile ns = read_small_file(sa_dir + "/namespace", kMaxLineFileBytes);
  if (ns.status == SmallFile::Status::Refused) throw KubeConfigError("in-cluster namespace: " + ns.problem);
  cfg.namespace_ = ns.text.substr(0, ns.text.find_first_of(" \t\r\n"));
  if (cfg.namespace_.empty()) cfg.namespace_ = "default";
  return cfg;
}

ClusterConfig load_default_config(const std::string& explicit_path) {
  if (!explicit_path.empty()) return load_kubeconfig(explicit_path);
  if (const char* env = std::getenv("KUBECONFIG"); env && *env) {
    std::string first = env;
    first = first.substr(0, first.find(':'));
    return load_kubeconfig(first);
  }
  if (const char* host = std::getenv("KUBERNETES_SERVICE_HOST"); host && *host) return in_cluster_config();
  const char* home = std::getenv("HOME");
  return load_kubeconfig(std::string(home ? home : "") + "/.kube/config");
}

}  // namespace weft::kube
