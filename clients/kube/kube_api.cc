// cpprest is kept in maintenance mode upstream, so everything about it lives
// in this file: TLS setup, request/response plumbing, streaming reads. The
// rest of the operator only sees nlohmann::json and ApiError.
#include "kube/kube_api.h"

// Before cpprest, whose U() macro breaks fmt's templates.
#include <spdlog/spdlog.h>

#include <cpprest/http_client.h>
#include <cpprest/uri_builder.h>

#include <boost/asio/ssl.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "kube/line_splitter.h"
#include "small_file.h"

namespace weft::kube {
namespace http = web::http;
using Clock = std::chrono::steady_clock;

std::string to_string(Propagation p) {
  switch (p) {
    case Propagation::Background: return "Background";
    case Propagation::Foreground: return "Foreground";
    case Propagation::Orphan: return "Orphan";
  }
  return "Background";
}

namespace {

// Token bucket shared by all non-watch requests of one KubeApi.
class TokenBucket {
 public:
  TokenBucket(double qps, int burst) : qps_(qps), burst_(std::max(1, burst)), tokens_(burst_) {}
  void acquire() {
    if (qps_ <= 0) return;
    std::unique_lock lock(mu_);
    refill();
    if (tokens_ < 1) {
      auto wait = std::chrono::duration<double>((1 - tokens_) / qps_);
      tokens_ -= 1;  // reserve, so concurrent callers queue behind us
      lock.unlock();
      std::this_thread::sleep_for(wait);
      return;
    }
    tokens_ -= 1;
  }

 private:
  void refill() {
    auto now = Clock::now();
    tokens_ = std::min<double>(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * qps_);
    last_ = now;
  }
  double qps_;
  int burst_;
  double tokens_;
  Clock::time_point last_ = Clock::now();
  std::mutex mu_;
};

ApiError status_error(int code, const std::string& body, const std::string& what) {
  ApiError e;
  e.status = code;
  auto j = Json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    e.reason = j.value("reason", "");
    e.message = what + ": " + j.value("message", body);
  } else {
    e.message = what + ": HTTP " + std::to_string(code) + " " + body.substr(0, 200);
  }
  if (e.reason.empty()) {
    if (code == 404) e.reason = "NotFound";
    else if (code == 409) e.reason = "Conflict";
    else if (code == 410) e.reason = "Expired";
    else if (code == 429) e.reason = "TooManyRequests";
  }
  return e;
}

std::string encode(const std::string& s) { return web::uri::encode_data_string(s); }

}  // namespace

struct KubeApi::Impl {
  ClusterConfig cluster;
  ApiOptions options;
  TokenBucket bucket;
  std::unique_ptr<http::client::http_client> client;
  mutable std::mutex counts_mu;
  std::map<std::string, long> counts;
  std::mutex token_mu;
  std::string token;
  Clock::time_point token_read{};

  Impl(ClusterConfig c, ApiOptions o) : cluster(std::move(c)), options(std::move(o)), bucket(options.qps, options.burst) {
    client = std::make_unique<http::client::http_client>(cluster.server, client_config(options.timeout));
  }

  http::client::http_client_config client_config(std::chrono::milliseconds timeout) const {
    http::client::http_client_config cfg;
    cfg.set_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    cfg.set_validate_certificates(!cluster.insecure_skip_tls_verify);
    const std::string ca = cluster.ca_pem, cert = cluster.client_cert_pem, key = cluster.client_key_pem;
    cfg.set_ssl_context_callback([ca, cert, key](boost::asio::ssl::context& ctx) {
      if (!ca.empty()) ctx.add_certificate_authority(boost::asio::buffer(ca.data(), ca.size()));
      if (!cert.empty()) {
        ctx.use_certificate_chain(boost::asio::buffer(cert.data(), cert.size()));
        ctx.use_private_key(boost::asio::buffer(key.data(), key.size()), boost::asio::ssl::context::pem);
      }
    });
    return cfg;
  }

  // A rotated service-account token is picked up within a minute.
  std::string bearer() {
    std::lock_guard lock(token_mu);
    if (cluster.bearer_token_file.empty()) return cluster.bearer_token;
    if (token.empty() || Clock::now() - token_read > std::chrono::minutes(1)) {
      // Never a blocking or unbounded read on a request's path
      // (small_file.h): a token file replaced by a FIFO keeps the old token.
      const SmallFile f = read_small_file(cluster.bearer_token_file, kMaxTextFileBytes);
      if (f.status == SmallFile::Status::Refused) spdlog::warn("bearer token not re-read: {}", f.problem);
      std::string t = f.text;
      while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
      if (!t.empty()) token = t;
      else if (token.empty()) token = cluster.bearer_token;
      token_read = Clock::now();
    }
    return token;
  }

  void count(const std::string& verb) {
    std::lock_guard lock(counts_mu);
    ++counts[verb];
  }

  http::http_request make_request(const http::method& method, const std::string& path_query) {
    http::http_request req(method);
    req.set_request_uri(path_query);
    req.headers().add("Accept", "application/json");
    req.headers().add("User-Agent", options.user_agent);
    if (std::string t = bearer(); !t.empty()) req.headers().add("Authorization", "Bearer " + t);
    return req;
  }

  Result<Json> call(const std::string& verb, const http::method& method, const std::string& path_query,
                    const Json* body = nullptr, const std::string& content_type = "application/json") {
    const std::string what = verb + " " + path_query;
    ApiError last;
    for (int attempt = 0; attempt <= options.max_retries; ++attempt) {
      bucket.acquire();
      count(verb);
      auto req = make_request(method, path_query);
      if (body) req.set_body(body->dump(), content_type);
      std::chrono::milliseconds retry_after{0};
      try {
        http::http_response resp = client->request(req).get();
        const int code = resp.status_code();
        std::string text = resp.extract_utf8string(true).get();
        if (code >= 200 && code < 300) {
          auto j = Json::parse(text, nullptr, false);
          if (j.is_discarded())
            return ApiError{code, "MalformedResponse", what + ": response is not valid JSON: " + text.substr(0, 200)};
          return j;
        }
        last = status_error(code, text, what);
        if (code != 429 && code < 500) return last;
        if (resp.headers().has("Retry-After")) {
          int secs = std::atoi(resp.headers()["Retry-After"].c_str());
          retry_after = std::chrono::seconds(std::clamp(secs, 0, 10));
        }
      } catch (const std::exception& e) {
        last = ApiError{0, "TransportError", what + ": " + e.what()};
      }
      if (attempt == options.max_retries) break;
      auto backoff = options.retry_base * (1 << std::min(attempt, 10));
      std::this_thread::sleep_for(std::max<std::chrono::milliseconds>(backoff, retry_after));
    }
    return last;
  }
};

KubeApi::KubeApi(ClusterConfig cluster, ApiOptions options)
    : impl_(std::make_unique<Impl>(std::move(cluster), std::move(options))) {}
KubeApi::~KubeApi() = default;

const ClusterConfig& KubeApi::cluster() const { return impl_->cluster; }

Result<Json> KubeApi::get(const Resource& r, const std::string& ns, const std::string& name) {
  return impl_->call("get", http::methods::GET, r.path(ns, name));
}

Result<ListResult> KubeApi::list(const Resource& r, const std::string& ns, const ListOptions& opts) {
  ListResult out;
  std::string cont;
  do {
    std::string q = r.path(ns) + "?limit=" + std::to_string(opts.limit);
    if (!opts.label_selector.empty()) q += "&labelSelector=" + encode(opts.label_selector);
    if (!opts.field_selector.empty()) q += "&fieldSelector=" + encode(opts.field_selector);
    if (!cont.empty()) q += "&continue=" + encode(cont);
    else if (!opts.resource_version.empty()) q += "&resourceVersion=" + encode(opts.resource_version);
    auto page = impl_->call("list", http::methods::GET, q);
    if (!page) return page.error();
    const Json& meta = (*page)["metadata"];
    if (!page->contains("items") || !(*page)["items"].is_array())
      return ApiError{200, "MalformedResponse", "list " + q + ": response has no items array"};
    for (auto& item : (*page)["items"]) {
      // List items omit kind/apiVersion; fill them so cached objects are whole.
      item["kind"] = r.kind;
      item["apiVersion"] = r.api_version();
      out.items.push_back(std::move(item));
    }
    out.resource_version = meta.value("resourceVersion", "");
    cont = meta.value("continue", "");
  } while (!cont.empty());
  return out;
}

Result<Json> KubeApi::create(const Resource& r, const std::string& ns, const Json& obj) {
  return impl_->call("create", http::methods::POST, r.path(ns), &obj);
}

Result<Json> KubeApi::create_subresource(const Resource& r, const std::string& ns, const std::string& name,
                                         const std::string& sub, const Json& body) {
  return impl_->call("create", http::methods::POST, r.path(ns, name, sub), &body);
}

Result<Json> KubeApi::update(const Resource& r, const std::string& ns, const Json& obj) {
  return impl_->call("update", http::methods::PUT, r.path(ns, obj["metadata"].value("name", "")), &obj);
}

Result<Json> KubeApi::update_status(const Resource& r, const std::string& ns, const Json& obj) {
  return impl_->call("update_status", http::methods::PUT, r.path(ns, obj["metadata"].value("name", ""), "status"),
                     &obj);
}

Result<Json> KubeApi::merge_patch(const Resource& r, const std::string& ns, const std::string& name,
                                  const Json& patch, bool status) {
  return impl_->call(status ? "patch_status" : "patch", http::methods::PATCH, r.path(ns, name, status ? "status" : ""),
                     &patch, "application/merge-patch+json");
}

Result<Json> KubeApi::strategic_merge_patch(const Resource& r, const std::string& ns, const std::string& name,
                                            const Json& patch, bool status) {
  return impl_->call(status ? "patch_status" : "patch", http::methods::PATCH, r.path(ns, name, status ? "status" : ""),
                     &patch, "application/strategic-merge-patch+json");
}

Result<Json> KubeApi::remove(const Resource& r, const std::string& ns, const std::string& name,
                             Propagation propagation, const std::string& uid, int grace_period_seconds,
                             const std::string& resource_version) {
  Json opts = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"propagationPolicy", to_string(propagation)}};
  if (!uid.empty()) opts["preconditions"]["uid"] = uid;
  if (!resource_version.empty()) opts["preconditions"]["resourceVersion"] = resource_version;
  if (grace_period_seconds >= 0) opts["gracePeriodSeconds"] = grace_period_seconds;
  return impl_->call("delete", http::methods::DEL, r.path(ns, name), &opts);
}

Result<bool> KubeApi::watch(const Resource& r, const std::string& ns, const WatchOptions& opts,
                            const std::function<void(const WatchEvent&)>& on_event, std::stop_token stop) {
  std::string q = r.path(ns) + "?watch=1&timeoutSeconds=" + std::to_string(opts.timeout_seconds);
  if (opts.bookmarks) q += "&allowWatchBookmarks=true";
  if (!opts.resource_version.empty()) q += "&resourceVersion=" + encode(opts.resource_version);
  if (!opts.label_selector.empty()) q += "&labelSelector=" + encode(opts.label_selector);
  const std::string what = "watch " + q;
  impl_->count("watch");

  // The client timeout is an inactivity timeout in cpprest (reset on every
  // read), so it only has to outlast the server's own stream timeout.
  http::client::http_client client(
      impl_->cluster.server, impl_->client_config(std::chrono::seconds(opts.timeout_seconds + 30)));
  pplx::cancellation_token_source cancel;
  std::stop_callback on_stop(stop, [&cancel] { cancel.cancel(); });
  try {
    http::http_response resp = client.request(impl_->make_request(http::methods::GET, q), cancel.get_token()).get();
    if (resp.status_code() != 200) return status_error(resp.status_code(), resp.extract_utf8string(true).get(), what);
    auto body = resp.body().streambuf();
    LineSplitter lines;
    std::optional<ApiError> failed;
    auto on_line = [&](std::string_view line) {
      auto j = Json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j.contains("object")) {
        failed = ApiError{0, "MalformedWatchEvent", what + ": cannot parse event: " + std::string(line.substr(0, 200))};
        return false;
      }
      WatchEvent ev{j["type"].get<std::string>(), std::move(j["object"])};
      if (ev.type == "ERROR") {
        int code = ev.object.value("code", 500);
        failed = ApiError{code, ev.object.value("reason", ""), what + ": " + ev.object.value("message", "watch error")};
        return false;
      }
      ev.object["kind"] = r.kind;
      ev.object["apiVersion"] = r.api_version();
      on_event(ev);
      return true;
    };
    std::vector<char> buf(64 * 1024);
    while (!stop.stop_requested()) {
      // getn(1) blocks until at least one byte (or end of stream); the rest of
      // what has arrived is then taken without waiting for a full buffer, so
      // a small event is delivered as soon as its chunk lands.
      size_t n = body.getn(reinterpret_cast<uint8_t*>(buf.data()), 1).get();
      if (n == 0) return true;  // server closed the stream (timeoutSeconds)
      size_t avail = std::min<size_t>(body.in_avail(), buf.size() - 1);
      if (avail > 0) n += body.getn(reinterpret_cast<uint8_t*>(buf.data()) + 1, avail).get();  // already buffered
      if (!lines.feed(std::string_view(buf.data(), n), on_line)) return *failed;
    }
    return false;
  } catch (const pplx::task_canceled&) {
    return false;
  } catch (const std::exception& e) {
    if (stop.stop_requested()) return false;
    return ApiError{0, "TransportError", what + ": " + e.what()};
  }
}

std::map<std::string, long> KubeApi::request_counts() const {
  std::lock_guard lock(impl_->counts_mu);
  return impl_->counts;
}

long KubeApi::total_requests() const {
  long total = 0;
  for (const auto& [verb, n] : request_counts()) total += n;
  return total;
}

}  // namespace weft::kube
