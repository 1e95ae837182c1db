#include "node/pod_plan.h"

#include <variant>

#include "kube/base64.h"

namespace weft::node {
namespace {

std::string str(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool flag(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

// fieldRef paths the kubelet supports for env.
std::optional<std::string> field_value(const Json& pod, const std::string& path, const std::string& pod_ip,
                                       const std::string& host_ip) {
  const Json& meta = pod["metadata"];
  const Json& spec = pod["spec"];
  if (path == "metadata.name") return str(meta, "name");
  if (path == "metadata.namespace") return str(meta, "namespace");
  if (path == "metadata.uid") return str(meta, "uid");
  if (path == "spec.nodeName") return str(spec, "nodeName");
  if (path == "spec.serviceAccountName") return str(spec, "serviceAccountName");
  if (path == "status.podIP") return pod_ip;
  if (path == "status.hostIP") return host_ip;
  for (const char* map : {"labels", "annotations"}) {
    const std::string prefix = std::string("metadata.") + map + "['";
    if (path.rfind(prefix, 0) == 0 && path.size() > prefix.size() + 2 && path.substr(path.size() - 2) == "']") {
      const std::string key = path.substr(prefix.size(), path.size() - prefix.size() - 2);
      if (meta.contains(map) && meta[map].contains(key)) return meta[map][key].get<std::string>();
      return std::string();
    }
  }
  return std::nullopt;
}

// A projected volume's sources (the kubelet's four): configMap, secret and
// downwardAPI resolved into vs->files now, serviceAccountToken left to the
// agent (vs->tokens). Returns why it cannot be planned, or "".
std::string plan_projected(const Json& pod, const Json& projected, const ObjectLookup& lookup,
                           const std::string& pod_ip, const std::string& host_ip, VolumeSpec* vs) {
  const std::string ns = str(pod["metadata"], "namespace");
  vs->service_account = str(pod["spec"], "serviceAccountName");
  if (vs->service_account.empty()) vs->service_account = "default";
  if (projected.contains("defaultMode") && projected["defaultMode"].is_number())
    vs->default_mode = projected["defaultMode"];
  if (!projected.contains("sources") || !projected["sources"].is_array()) return "projected: no sources";
  for (const auto& src : projected["sources"]) {
    if (src.contains("serviceAccountToken")) {
      const Json& t = src["serviceAccountToken"];
      TokenSource ts;
      ts.path = str(t, "path");
      ts.audience = str(t, "audience");
      if (t.contains("expirationSeconds") && t["expirationSeconds"].is_number_integer())
        ts.expiration_seconds = t["expirationSeconds"];
      if (ts.path.empty()) return "serviceAccountToken without a path";
      vs->tokens.push_back(ts);
    } else if (src.contains("configMap") || src.contains("secret")) {
      const bool secret = src.contains("secret");
      const Json& s = secret ? src["secret"] : src["configMap"];
      const std::string name = str(s, "name");
      const Json* obj = secret ? lookup.secret(ns, name) : lookup.configmap(ns, name);
      if (!obj) {
        if (flag(s, "optional")) continue;
        return std::string(secret ? "secret" : "configmap") + " \"" + name + "\" not found";
      }
      auto f = volume_files(*obj, s.contains("items") ? s["items"] : Json::array(), secret);
      if (auto* bad = std::get_if<std::string>(&f)) return std::string(secret ? "secret" : "configmap") + " \"" + name + "\": " + *bad;
      for (auto& [path, bytes] : std::get<0>(f)) vs->files[path] = bytes;
    } else if (src.contains("downwardAPI")) {
      const Json& d = src["downwardAPI"];
      if (d.contains("items"))
        for (const auto& item : d["items"]) {
          if (!item.contains("fieldRef")) return "downwardAPI item " + str(item, "path") + ": only fieldRef is supported";
          const std::string field = str(item["fieldRef"], "fieldPath");
          auto value = field_value(pod, field, pod_ip, host_ip);
          if (!value) return "downwardAPI item " + str(item, "path") + ": unsupported fieldPath '" + field + "'";
          vs->files[str(item, "path")] = *value;
        }
    } else {
      return "projected: only serviceAccountToken, configMap, secret and downwardAPI sources are supported";
    }
  }
  return "";
}

}  // namespace

std::string expand_vars(const std::string& s, const std::map<std::string, std::string>& vars) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '$' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    if (s[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    if (s[i + 1] == '(') {
      auto close = s.find(')', i + 2);
      if (close != std::string::npos) {
        auto it = vars.find(s.substr(i + 2, close - i - 2));
        if (it != vars.end()) {
          out += it->second;
          i = close;
          continue;
        }
      }
    }
    out += s[i];
  }
  return out;
}

std::optional<std::string> object_key_value(const Json& obj, const std::string& key, bool is_secret) {
  if (is_secret) {
    if (obj.contains("data") && obj["data"].contains(key)) return kube::base64_decode(obj["data"][key].get<std::string>());
    if (obj.contains("stringData") && obj["stringData"].contains(key))
      return obj["stringData"][key].get<std::string>();
    return std::nullopt;
  }
  if (obj.contains("data") && obj["data"].contains(key)) return obj["data"][key].get<std::string>();
  if (obj.contains("binaryData") && obj["binaryData"].contains(key))
    return kube::base64_decode(obj["binaryData"][key].get<std::string>());
  return std::nullopt;
}

std::variant<std::map<std::string, std::string>, std::string> volume_files(const Json& obj, const Json& items,
                                                                           bool is_secret) {
  std::map<std::string, std::string> files;
  if (items.is_array() && !items.empty()) {
    for (const auto& item : items) {
      const std::string key = str(item, "key"), path = str(item, "path");
      auto v = object_key_value(obj, key, is_secret);
      if (!v) return "key '" + key + "' not found";
      files[path.empty() ? key : path] = *v;
    }
    return files;
  }
  for (const char* field : {"data", "binaryData", "stringData"}) {
    if (!obj.contains(field) || !obj[field].is_object()) continue;
    for (auto it = obj[field].begin(); it != obj[field].end(); ++it) {
      auto v = object_key_value(obj, it.key(), is_secret);
      if (!v) return "key '" + it.key() + "' is not valid base64";
      files[it.key()] = *v;
    }
  }
  return files;
}

int grace_period_seconds(const Json& pod) {
  const Json& meta = pod["metadata"];
  if (meta.contains("deletionGracePeriodSeconds") && meta["deletionGracePeriodSeconds"].is_number())
    return meta["deletionGracePeriodSeconds"].get<int>();
  if (pod.contains("spec") && pod["spec"].contains("terminationGracePeriodSeconds") &&
      pod["spec"]["terminationGracePeriodSeconds"].is_number())
    return pod["spec"]["terminationGracePeriodSeconds"].get<int>();
  return 30;
}

std::variant<PodPlan, PlanError> plan_pod(const Json& pod, const ObjectLookup& lookup, const std::string& pod_ip,
                                          const std::string& host_ip) {
  PodPlan p;
  const Json& meta = pod["metadata"];
  const Json& spec = pod["spec"];
  p.ns = str(meta, "namespace");
  p.name = str(meta, "name");
  p.uid = str(meta, "uid");
  p.node = str(spec, "nodeName");
  p.hostname = str(spec, "hostname").empty() ? p.name : str(spec, "hostname");
  if (spec.contains("restartPolicy")) p.restart_policy = str(spec, "restartPolicy");
  if (!spec.contains("containers") || !spec["containers"].is_array() || spec["containers"].empty())
    return PlanError{"CreateContainerConfigError", "pod has no containers"};
  const Json& c = spec["containers"][0];
  p.container = str(c, "name");
  p.working_dir = str(c, "workingDir");
  p.logs_on_error = str(c, "terminationMessagePolicy") == "FallbackToLogsOnError";
  if (const std::string path = str(c, "terminationMessagePath"); !path.empty()) p.termination_message_path = path;
  if (p.termination_message_path[0] != '/')
    return PlanError{"CreateContainerConfigError", "terminationMessagePath must be absolute"};

  std::map<std::string, std::string> vars;
  if (c.contains("env"))
    for (const auto& e : c["env"]) {
      const std::string name = str(e, "name");
      std::string value;
      if (e.contains("valueFrom")) {
        const Json& from = e["valueFrom"];
        if (from.contains("fieldRef")) {
          auto v = field_value(pod, str(from["fieldRef"], "fieldPath"), pod_ip, host_ip);
          if (!v)
            return PlanError{"CreateContainerConfigError",
                             "env " + name + ": unsupported fieldPath '" + str(from["fieldRef"], "fieldPath") + "'"};
          value = *v;
        } else if (from.contains("secretKeyRef") || from.contains("configMapKeyRef")) {
          const bool secret = from.contains("secretKeyRef");
          const Json& ref = secret ? from["secretKeyRef"] : from["configMapKeyRef"];
          const std::string obj_name = str(ref, "name"), key = str(ref, "key");
          const Json* obj = secret ? lookup.secret(p.ns, obj_name) : lookup.configmap(p.ns, obj_name);
          std::optional<std::string> v;
          if (obj) v = object_key_value(*obj, key, secret);
          if (!v) {
            if (flag(ref, "optional")) continue;
            return PlanError{"CreateContainerConfigError",
                             std::string(secret ? "secret" : "configmap") + " \"" + obj_name + "\"" +
                                 (obj ? " has no key \"" + key + "\"" : " not found")};
          }
          value = *v;
        } else {
          return PlanError{"CreateContainerConfigError", "env " + name + ": unsupported valueFrom"};
        }
      } else {
        value = expand_vars(str(e, "value"), vars);
      }
      vars[name] = value;
      bool replaced = false;
      for (auto& kv : p.env)
        if (kv.first == name) kv.second = value, replaced = true;
      if (!replaced) p.env.emplace_back(name, value);
    }

  for (const char* field : {"command", "args"})
    if (c.contains(field))
      for (const auto& a : c[field]) p.argv.push_back(expand_vars(a.get<std::string>(), vars));
  if (!c.contains("command") || c["command"].empty())
    return PlanError{"CreateContainerConfigError", "container has no command (weft-node does not read images)"};

  if (spec.contains("volumes"))
    for (const auto& v : spec["volumes"]) {
      VolumeSpec vs;
      vs.name = str(v, "name");
      if (v.contains("configMap") || v.contains("secret")) {
        const bool secret = v.contains("secret");
        const Json& src = secret ? v["secret"] : v["configMap"];
        vs.kind = secret ? VolumeKind::Secret : VolumeKind::ConfigMap;
        vs.object = secret ? str(src, "secretName") : str(src, "name");
        vs.optional = flag(src, "optional");
        if (src.contains("items")) vs.items = src["items"];
        if (src.contains("defaultMode") && src["defaultMode"].is_number()) vs.default_mode = src["defaultMode"];
      } else if (v.contains("emptyDir")) {
        vs.kind = VolumeKind::EmptyDir;
      } else if (v.contains("projected")) {
        vs.kind = VolumeKind::Projected;
        if (auto err = plan_projected(pod, v["projected"], lookup, pod_ip, host_ip, &vs); !err.empty())
          return PlanError{"CreateContainerConfigError", "volume " + vs.name + ": " + err};
      } else if (v.contains("hostPath")) {
        vs.kind = VolumeKind::HostPath;
        vs.host_path = str(v["hostPath"], "path");
        vs.host_type = str(v["hostPath"], "type");
      } else {
        return PlanError{"CreateContainerConfigError",
                         "volume " + vs.name + ": only configMap, secret, emptyDir, hostPath and projected are supported"};
      }
      p.volumes.push_back(vs);
    }
  if (c.contains("volumeMounts"))
    for (const auto& m : c["volumeMounts"]) {
      MountSpec ms{str(m, "name"), str(m, "mountPath"), str(m, "subPath"), flag(m, "readOnly")};
      bool known = false;
      for (const auto& v : p.volumes) known = known || v.name == ms.volume;
      if (!known) return PlanError{"CreateContainerConfigError", "volumeMount " + ms.volume + ": no such volume"};
      if (ms.mount_path.empty() || ms.mount_path[0] != '/')
        return PlanError{"CreateContainerConfigError", "volumeMount " + ms.volume + ": mountPath must be absolute"};
      p.mounts.push_back(ms);
    }
  return p;
}

}  // namespace weft::node
