// KubeApi: the operator's only door to the Kubernetes API server, and the
// only code that includes cpprest (kube_api.cc). JSON in and out is
// nlohmann::json; errors come back as ApiError (see result.h), never as
// exceptions.
//
// Guarantees:
//  - Every non-watch request passes a client-side token bucket (qps, burst)
//    and carries a timeout; 429 and 5xx answers and transport errors are
//    retried up to max_retries with backoff (Retry-After honoured), so a
//    create may come back AlreadyExists after a retry and callers treat that
//    as success where it is.
//  - Updates send metadata.resourceVersion: a stale write fails with
//    Conflict instead of overwriting a newer object.
//  - watch() streams events as the server sends them (chunk boundaries do not
//    matter), reports BOOKMARKs, and ends with Result error 410 (Gone) when
//    the resourceVersion is too old, so the caller relists.
//  - request_counts() counts requests by verb, for tests and benchmarks that
//    check how many calls an operation costs.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <stop_token>
#include <string>

#include "kube/kube_config.h"
#include "kube/resource.h"
#include "kube/result.h"

namespace weft::kube {

using Json = nlohmann::json;

struct ApiOptions {
  double qps = 50;                 // sustained requests per second (watches excluded)
  int burst = 100;                 // token-bucket depth
  std::chrono::milliseconds timeout{30000};  // per request (watch: see WatchOptions)
  int max_retries = 4;             // for 429 / 5xx / transport errors
  std::chrono::milliseconds retry_base{100};
  std::string user_agent = "weft-operator/0.1";
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  int limit = 500;                 // page size; pages are followed via `continue`
  std::string resource_version;    // "" = most recent (quorum read)
};

struct ListResult {
  Json items = Json::array();
  std::string resource_version;    // of the list; start a watch from here
};

struct WatchOptions {
  std::string resource_version;    // start after this version
  std::string label_selector;
  int timeout_seconds = 300;       // server ends the stream after this long
  bool bookmarks = true;
};

struct WatchEvent {
  std::string type;                // ADDED, MODIFIED, DELETED, BOOKMARK
  Json object;
};

enum class Propagation { Background, Foreground, Orphan };

class KubeApi {
 public:
  KubeApi(ClusterConfig cluster, ApiOptions options = {});
  ~KubeApi();
  KubeApi(const KubeApi&) = delete;
  KubeApi& operator=(const KubeApi&) = delete;

  const ClusterConfig& cluster() const;

  Result<Json> get(const Resource& r, const std::string& ns, const std::string& name);
  // All pages, concatenated.
  Result<ListResult> list(const Resource& r, const std::string& ns, const ListOptions& opts = {});
  Result<Json> create(const Resource& r, const std::string& ns, const Json& obj);
  // POST to a subresource of an object, e.g. a ServiceAccount's `token`
  // (a TokenRequest); returns what the server answers.
  Result<Json> create_subresource(const Resource& r, const std::string& ns, const std::string& name,
                                  const std::string& sub, const Json& body);
  // PUT with obj.metadata.resourceVersion; Conflict when it is stale.
  Result<Json> update(const Resource& r, const std::string& ns, const Json& obj);
  Result<Json> update_status(const Resource& r, const std::string& ns, const Json& obj);
  // JSON merge patch (RFC 7386) of the object or of its status subresource.
  Result<Json> merge_patch(const Resource& r, const std::string& ns, const std::string& name, const Json& patch,
                           bool status = false);
  // Strategic merge patch: for built-in kinds only (the API server refuses
  // it for custom resources). Lists the Kubernetes types mark as merged by a
  // key (a pod's status.conditions by `type`) keep the entries the patch
  // does not name, e.g. a condition another writer set meanwhile.
  Result<Json> strategic_merge_patch(const Resource& r, const std::string& ns, const std::string& name,
                                     const Json& patch, bool status = false);
  // Deletes; `uid` (optional) is a precondition so a recreated object with
  // the same name is left alone. NotFound is returned as an error.
  // `grace_period_seconds` >= 0 overrides the object's grace period (a node
  // agent finalises a pod whose processes are gone with 0); -1 = default.
  // `resource_version` (optional) is a precondition too: the object is
  // deleted only as the caller saw it (Conflict if it changed since).
  Result<Json> remove(const Resource& r, const std::string& ns, const std::string& name,
                      Propagation propagation = Propagation::Background, const std::string& uid = "",
                      int grace_period_seconds = -1, const std::string& resource_version = "");

  // Streams events to on_event until the server closes the stream (returns
  // true), stop is requested (returns false), or an error happens (error;
  // status 410 = resourceVersion too old, relist).
  Result<bool> watch(const Resource& r, const std::string& ns, const WatchOptions& opts,
                     const std::function<void(const WatchEvent&)>& on_event, std::stop_token stop);

  std::map<std::string, long> request_counts() const;
  long total_requests() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string to_string(Propagation p);

}  // namespace weft::kube
