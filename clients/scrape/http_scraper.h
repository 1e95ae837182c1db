// Scrapes one Prometheus endpoint over plain HTTP: a blocking HTTP/1.1 GET
// on libcurl's easy interface with an overall deadline, then parse_text.
// Meant for the operator's reads of a rank's /metrics (pod IP + metrics
// port), which are small, so one connection per call and no reuse.
// defines: HttpResponse, http_get, scrape, kMaxBodyBytes
//          (Endpoint and ScrapeResult: endpoint.h).
//
// Never throws: every failure (resolve, connect, timeout, a body over the
// limit, a non-200 status, a malformed response or exposition) comes back as
// `error`, naming the URL. Safe to call from many threads at once (the
// scrape poller reads ranks in parallel): each call owns its handle. Asks
// for the text format (prometheus servers that could negotiate protobuf or
// OpenMetrics answer text/plain; version=0.0.4); ignores http_proxy and
// friends, since pod IPs are reached directly.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "scrape/endpoint.h"

namespace weft::scrape {

// A body larger than this is cut off and the call fails: a weft rank's
// exposition is a few KiB and prometheus' own is ~100 KiB, so anything near
// this is a wrong or hostile server, not one to buffer without bound.
inline constexpr size_t kMaxBodyBytes = 16u << 20;

struct HttpResponse {
  int status = 0;     // 0 unless the whole response arrived
  std::string body;   // de-chunked
  std::string error;  // empty on a complete response (any status)
};

// One GET; `timeout` bounds resolve, connect, send and the whole read together.
HttpResponse http_get(const Endpoint& ep, std::chrono::milliseconds timeout, size_t max_body = kMaxBodyBytes);

ScrapeResult scrape(const Endpoint& ep, std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace weft::scrape
