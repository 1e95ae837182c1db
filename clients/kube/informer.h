// Informer: keeps a local, read-only cache of one resource kind (optionally
// one label selector) current with list + watch, and tells handlers which
// objects changed. Handlers only enqueue keys (watch events never
// drive logic directly: reconcile is level-triggered, docs/operator/reconcile.md).
//
// Invariants:
//  - Cached objects are shared immutable snapshots (shared_ptr<const Json>);
//    nobody edits them. Readers copy before changing anything.
//  - The watch resumes from the last resourceVersion seen (events and
//    BOOKMARKs); a 410 Gone or an unparsable stream triggers a full relist,
//    after which handlers see every object that was added, changed or
//    deleted meanwhile.
//  - Watches ask for BOOKMARKs (allowWatchBookmarks): the API server sends
//    one about every minute and shortly before a stream's timeoutSeconds
//    ends, carrying the version its watch cache has reached for the whole
//    resource kind, including writes this informer's namespace or selector
//    leaves out. A bookmark only advances the stored resourceVersion:
//    nothing is cached and no handler is called. So a quiet informer (its
//    selector matches nothing that changes) re-watches from a recent
//    version, not one the watch cache may have dropped meanwhile, which
//    would cost a 410 and a relist.
//  - Every `resync` period all cached objects are handed to the handlers
//    again, so a missed edge is eventually reconciled.
//  - An optional index label gives O(1) lookup of objects by (namespace,
//    label value), e.g. pods of one job.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>
#include <vector>

#include "kube/kube_api.h"

namespace weft::kube {

using ObjectPtr = std::shared_ptr<const Json>;

std::string object_key(const Json& obj);  // "namespace/name"

class Informer {
 public:
  using Handler = std::function<void(const Json& obj)>;

  Informer(KubeApi& api, Resource resource, std::string ns = "", std::string label_selector = "",
           std::chrono::seconds resync = std::chrono::seconds(300), std::string index_label = "");

  void add_handler(Handler h);  // before run()
  // Each watch stream asks the server to end it after `base` to 1.5 x `base`
  // (random, so many informers do not reconnect together); 240 s unless set.
  // Before run().
  void set_watch_timeout(std::chrono::seconds base) { watch_timeout_ = base; }

  // Lists, then watches until stop is requested; never returns early.
  void run(std::stop_token stop);

  bool synced() const { return synced_.load(); }
  bool wait_synced(std::chrono::milliseconds timeout) const;

  ObjectPtr get(const std::string& ns, const std::string& name) const;
  std::vector<ObjectPtr> list() const;
  std::vector<ObjectPtr> by_index(const std::string& ns, const std::string& label_value) const;
  size_t size() const;

  long relists() const { return relists_.load(); }
  long watches() const { return watches_.load(); }
  long bookmarks() const { return bookmarks_.load(); }  // BOOKMARK events received
  std::string last_resource_version() const;
  // The resourceVersion the latest watch started from.
  std::string watch_resource_version() const;

 private:
  void replace(const Json& items);
  void apply(const std::string& type, Json obj);
  void notify(const Json& obj);
  std::string index_value(const Json& obj) const;
  void index_remove(const std::string& key, const Json& obj);
  void index_add(const std::string& key, const Json& obj);
  bool sleep_for(std::stop_token& stop, std::chrono::milliseconds d);
  void resync_loop(std::stop_token stop);

  KubeApi& api_;
  Resource resource_;
  std::string ns_, selector_, index_label_;
  std::chrono::seconds resync_;
  std::chrono::seconds watch_timeout_{240};
  std::vector<Handler> handlers_;

  mutable std::mutex mu_;
  mutable std::condition_variable_any cv_;
  std::map<std::string, ObjectPtr> store_;
  std::map<std::string, std::set<std::string>> index_;  // "ns/value" -> keys
  std::string rv_;
  std::string watch_rv_;
  std::atomic<bool> synced_{false};
  std::atomic<long> relists_{0}, watches_{0}, bookmarks_{0};
};

}  // namespace weft::kube
