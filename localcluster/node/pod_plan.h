// PodPlan: what weft-node starts for one bound Pod, computed from the Pod and
// the objects it refers to, with no I/O (so it is unit-tested on JSON alone).
//
// Invariants:
//  - Only the first container runs; init containers, probes and image
//    entrypoints are not supported (a pod without `command` is refused with a
//    reason, as a kubelet refuses a bad config).
//  - Env is resolved the way the kubelet resolves it: `value` with $(VAR)
//    expansion of earlier variables, `valueFrom` field refs (metadata.*,
//    spec.nodeName, spec.serviceAccountName, status.podIP, status.hostIP)
//    and secret / ConfigMap key refs. A missing object or key is
//    CreateContainerConfigError unless the ref is optional.
//  - command and args get $(VAR) expansion from the final env; `$$` is `$`.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace weft::node {

using Json = nlohmann::json;

enum class VolumeKind { ConfigMap, Secret, EmptyDir, HostPath, Projected };

// A projected volume's serviceAccountToken source: the agent asks the API
// server for a token of the pod's ServiceAccount bound to the pod
// (TokenRequest) when the container starts.
struct TokenSource {
  std::string path;             // file in the volume
  std::string audience;         // "" = the API server's own audiences
  int expiration_seconds = 3600;
};

struct VolumeSpec {
  std::string name;
  VolumeKind kind = VolumeKind::EmptyDir;
  std::string object;        // ConfigMap or Secret name
  bool optional = false;     // a missing ConfigMap/Secret is an empty volume
  Json items = Json::array();  // [{key, path}] subset; empty = every key
  int default_mode = 0644;
  std::string host_path;     // HostPath
  std::string host_type;     // "", DirectoryOrCreate, Directory, FileOrCreate, File
  // Projected: the configMap, secret and downwardAPI sources resolved when
  // the pod was planned (path -> bytes), and the tokens still to request for
  // `service_account` (the ServiceAccount admission's kube-api-access-*
  // volume: token, ca.crt from kube-root-ca.crt, namespace).
  std::map<std::string, std::string> files;
  std::vector<TokenSource> tokens;
  std::string service_account;
};

struct MountSpec {
  std::string volume;
  std::string mount_path;
  std::string sub_path;
  bool read_only = false;
};

struct PodPlan {
  std::string ns, name, uid, node;
  std::string hostname;      // spec.hostname or the pod name
  std::string container;     // the container's name
  std::vector<std::string> argv;  // argv[0] as written in the pod (not resolved)
  std::vector<std::pair<std::string, std::string>> env;  // in order
  std::string working_dir;   // "" = the pod's own work dir
  std::vector<VolumeSpec> volumes;
  std::vector<MountSpec> mounts;
  std::string restart_policy = "Always";
  bool logs_on_error = false;  // terminationMessagePolicy: FallbackToLogsOnError
  // terminationMessagePath: a file of the run's own is bind-mounted there and
  // read when the container exits, as the kubelet does.
  std::string termination_message_path = "/dev/termination-log";
};

// Why a pod cannot start yet; shown as the container's waiting state.
struct PlanError {
  std::string reason;   // CreateContainerConfigError, ...
  std::string message;
};

// Read-only views of the objects a pod refers to: (namespace, name) -> object
// or nullptr when it does not exist.
struct ObjectLookup {
  std::function<const Json*(const std::string& ns, const std::string& name)> secret;
  std::function<const Json*(const std::string& ns, const std::string& name)> configmap;
};

// `pod_ip` / `host_ip` are what status.podIP / status.hostIP will say.
std::variant<PodPlan, PlanError> plan_pod(const Json& pod, const ObjectLookup& lookup, const std::string& pod_ip,
                                          const std::string& host_ip);

// Kubernetes $(VAR) expansion: known names are replaced, unknown ones are
// left as written, `$$` becomes `$`.
std::string expand_vars(const std::string& s, const std::map<std::string, std::string>& vars);

// The value of a ConfigMap/Secret key as bytes (Secret data and ConfigMap
// binaryData are base64); nullopt when the key is missing or, which a real
// API server never stores, its base64 does not decode.
std::optional<std::string> object_key_value(const Json& obj, const std::string& key, bool is_secret);

// Every key of a ConfigMap/Secret as relative file path -> bytes, honouring
// `items`; an item naming a missing key is an error (returned as message).
std::variant<std::map<std::string, std::string>, std::string> volume_files(const Json& obj, const Json& items,
                                                                           bool is_secret);

// The container's grace period in seconds for a pod being deleted:
// metadata.deletionGracePeriodSeconds, else spec.terminationGracePeriodSeconds, else 30.
int grace_period_seconds(const Json& pod);

}  // namespace weft::node
