#include "kube/informer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <thread>

namespace weft::kube {

std::string object_key(const Json& obj) {
  const Json& m = obj["metadata"];
  std::string ns = m.value("namespace", "");
  return ns.empty() ? m.value("name", "") : ns + "/" + m.value("name", "");
}

Informer::Informer(KubeApi& api, Resource resource, std::string ns, std::string label_selector,
                   std::chrono::seconds resync, std::string index_label)
    : api_(api), resource_(std::move(resource)), ns_(std::move(ns)), selector_(std::move(label_selector)),
      index_label_(std::move(index_label)), resync_(resync) {}

void Informer::add_handler(Handler h) { handlers_.push_back(std::move(h)); }

bool Informer::wait_synced(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return synced_.load(); });
}

ObjectPtr Informer::get(const std::string& ns, const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = store_.find(ns.empty() ? name : ns + "/" + name);
  return it == store_.end() ? nullptr : it->second;
}

std::vector<ObjectPtr> Informer::list() const {
  std::lock_guard lock(mu_);
  std::vector<ObjectPtr> out;
  out.reserve(store_.size());
  for (const auto& [k, v] : store_) out.push_back(v);
  return out;
}

std::vector<ObjectPtr> Informer::by_index(const std::string& ns, const std::string& value) const {
  std::lock_guard lock(mu_);
  std::vector<ObjectPtr> out;
  auto it = index_.find(ns + "/" + value);
  if (it == index_.end()) return out;
  for (const auto& key : it->second) out.push_back(store_.at(key));
  return out;
}

size_t Informer::size() const {
  std::lock_guard lock(mu_);
  return store_.size();
}

std::string Informer::last_resource_version() const {
  std::lock_guard lock(mu_);
  return rv_;
}

std::string Informer::watch_resource_version() const {
  std::lock_guard lock(mu_);
  return watch_rv_;
}

std::string Informer::index_value(const Json& obj) const {
  if (index_label_.empty()) return "";
  const Json& labels = obj["metadata"].contains("labels") ? obj["metadata"]["labels"] : Json::object();
  auto it = labels.find(index_label_);
  return it == labels.end() || !it->is_string() ? "" : it->get<std::string>();
}

void Informer::index_remove(const std::string& key, const Json& obj) {
  std::string v = index_value(obj);
  if (v.empty()) return;
  auto it = index_.find(obj["metadata"].value("namespace", "") + "/" + v);
  if (it == index_.end()) return;
  it->second.erase(key);
  if (it->second.empty()) index_.erase(it);
}

void Informer::index_add(const std::string& key, const Json& obj) {
  std::string v = index_value(obj);
  if (!v.empty()) index_[obj["metadata"].value("namespace", "") + "/" + v].insert(key);
}

void Informer::notify(const Json& obj) {
  for (const auto& h : handlers_) h(obj);
}

// After a relist, handlers must learn about deletions that happened while
// the watch was down, so the old store is diffed against the new list.
void Informer::replace(const Json& items) {
  std::map<std::string, ObjectPtr> fresh;
  for (const auto& item : items) fresh[object_key(item)] = std::make_shared<const Json>(item);
  std::vector<ObjectPtr> changed;
  {
    std::lock_guard lock(mu_);
    for (const auto& [k, old] : store_)
      if (!fresh.count(k)) changed.push_back(old);
    for (const auto& [k, obj] : fresh) {
      auto it = store_.find(k);
      if (it == store_.end() ||
          (*it->second)["metadata"].value("resourceVersion", "") != (*obj)["metadata"].value("resourceVersion", ""))
        changed.push_back(obj);
    }
    store_ = std::move(fresh);
    index_.clear();
    for (const auto& [k, obj] : store_) index_add(k, *obj);
    synced_ = true;
  }
  cv_.notify_all();
  for (const auto& obj : changed) notify(*obj);
}

void Informer::apply(const std::string& type, Json obj) {
  if (type == "BOOKMARK") {
    // No object changed: the server only says how far it has got.
    auto meta = obj.find("metadata");
    std::lock_guard lock(mu_);
    if (meta != obj.end() && meta->is_object()) rv_ = meta->value("resourceVersion", rv_);
    ++bookmarks_;
    return;
  }
  auto ptr = std::make_shared<const Json>(std::move(obj));
  const std::string key = object_key(*ptr);
  {
    std::lock_guard lock(mu_);
    rv_ = (*ptr)["metadata"].value("resourceVersion", rv_);
    auto it = store_.find(key);
    if (it != store_.end()) index_remove(key, *it->second);
    if (type == "DELETED") {
      store_.erase(key);
    } else {
      store_[key] = ptr;
      index_add(key, *ptr);
    }
  }
  notify(*ptr);
}

bool Informer::sleep_for(std::stop_token& stop, std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, stop, d, [] { return false; });
  return !stop.stop_requested();
}

void Informer::resync_loop(std::stop_token stop) {
  while (sleep_for(stop, std::chrono::duration_cast<std::chrono::milliseconds>(resync_)))
    for (const auto& obj : list()) notify(*obj);
}

void Informer::run(std::stop_token stop) {
  std::jthread resync;
  if (resync_.count() > 0) resync = std::jthread([this](std::stop_token s) { resync_loop(s); });
  std::stop_callback stop_resync(stop, [&resync] { resync.request_stop(); });
  std::mt19937 rng(std::random_device{}());
  bool need_list = true;
  auto backoff = std::chrono::milliseconds(200);
  const std::string what = resource_.plural + (ns_.empty() ? "" : " in " + ns_);
  while (!stop.stop_requested()) {
    if (need_list) {
      auto res = api_.list(resource_, ns_, ListOptions{selector_, "", 500, ""});
      if (!res) {
        spdlog::warn("informer {}: list failed ({}), retrying in {} ms", what, res.error().message, backoff.count());
        sleep_for(stop, backoff);
        backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
        continue;
      }
      {
        std::lock_guard lock(mu_);
        rv_ = res->resource_version;
      }
      ++relists_;
      replace(res->items);
      need_list = false;
    }
    // Random stream lifetimes spread the reconnects of many watches.
    const int base = static_cast<int>(std::max<long>(1, watch_timeout_.count()));
    WatchOptions wo{"", selector_, base + static_cast<int>(rng() % std::max(1, base / 2)), true};
    {
      std::lock_guard lock(mu_);
      wo.resource_version = watch_rv_ = rv_;
    }
    ++watches_;
    auto res = api_.watch(resource_, ns_, wo, [this](const WatchEvent& ev) { apply(ev.type, ev.object); }, stop);
    if (res) {
      backoff = std::chrono::milliseconds(200);
      continue;  // stream ended normally (or stop): re-watch from the last version
    }
    const ApiError& e = res.error();
    if (e.gone() || e.reason == "MalformedWatchEvent") {
      spdlog::info("informer {}: {}; relisting", what, e.message);
      need_list = true;
      continue;
    }
    spdlog::warn("informer {}: watch failed ({}), retrying in {} ms", what, e.message, backoff.count());
    sleep_for(stop, backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
    if (e.status != 0 && !e.transient()) need_list = true;
  }
}

}  // namespace weft::kube
