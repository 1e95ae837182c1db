#include "scrape/http_scraper.h"

#include <curl/curl.h>

#include <algorithm>
#include <memory>
#include <mutex>

namespace weft::scrape {
namespace {

struct EasyDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct ListDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using Easy = std::unique_ptr<CURL, EasyDeleter>;
using HeaderList = std::unique_ptr<curl_slist, ListDeleter>;

// curl_global_init once per process, before the first handle; never undone
// (the operator scrapes until it exits).
void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Sink {
  std::string* body;
  size_t max;
  bool overflowed = false;
};

// Returning less than offered fails the transfer (CURLE_WRITE_ERROR): that is
// how a body over the limit is cut off mid-stream.
size_t write_body(char* data, size_t size, size_t n, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t bytes = size * n;
  if (sink->body->size() + bytes > sink->max) {
    sink->overflowed = true;
    return 0;
  }
  sink->body->append(data, bytes);
  return bytes;
}

}  // namespace

std::string Endpoint::url() const {
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + path;
}

HttpResponse http_get(const Endpoint& ep, std::chrono::milliseconds timeout, size_t max_body) {
  HttpResponse r;
  const std::string url = ep.url();
  init_curl_once();
  Easy curl(curl_easy_init());
  HeaderList headers(curl_slist_append(nullptr, "Accept: text/plain;version=0.0.4;q=1,*/*;q=0.1"));
  if (!curl || !headers) {
    r.error = url + ": cannot create a libcurl handle";
    return r;
  }
  std::string body;
  Sink sink{&body, max_body};
  char detail[CURL_ERROR_SIZE] = "";
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_USERAGENT, "weft-operator");
  curl_easy_setopt(c, CURLOPT_PROXY, "");  // pod IPs directly, whatever http_proxy says
  curl_easy_setopt(c, CURLOPT_FORBID_REUSE, 1L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM around the resolver
  const long timeout_ms = std::max<long>(1, static_cast<long>(timeout.count()));  // 0 would mean none
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(max_body));  // a declared length
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, detail);

  const CURLcode rc = curl_easy_perform(c);
  if (rc == CURLE_OK) {
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    r.status = static_cast<int>(status);
    r.body = std::move(body);
    return r;
  }
  curl_off_t declared = -1;
  curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &declared);
  if (sink.overflowed || rc == CURLE_FILESIZE_EXCEEDED) {
    r.error = url + ": body larger than " + std::to_string(max_body) + " bytes";
  } else if (rc == CURLE_PARTIAL_FILE && declared >= 0) {
    r.error = url + ": body shorter than its Content-Length (" + std::to_string(body.size()) + " of " +
              std::to_string(declared) + " bytes)";
  } else {
    r.error = url + ": " + (detail[0] ? detail : curl_easy_strerror(rc));
  }
  return r;
}

ScrapeResult scrape(const Endpoint& ep, std::chrono::milliseconds timeout) {
  ScrapeResult out;
  HttpResponse resp = http_get(ep, timeout);
  if (!resp.error.empty()) {
    out.error = resp.error;
    return out;
  }
  if (resp.status != 200) {
    out.error = ep.url() + ": HTTP " + std::to_string(resp.status);
    return out;
  }
  ParseResult parsed = parse_text(resp.body);
  out.metrics = std::move(parsed.exposition);
  if (parsed.error)
    out.error = ep.url() + ": line " + std::to_string(parsed.error->line) + ": " + parsed.error->message;
  return out;
}

}  // namespace weft::scrape
