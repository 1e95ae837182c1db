// Scrapes one Prometheus endpoint over plain HTTP: a blocking HTTP/1.1 GET
// with Connection: close and an overall deadline, then parse_text. Meant for
// the operator's reads of a rank's /metrics (pod IP + metrics port), which
// are small, so one connection per scrape and no keep-alive.
// defines: HttpResponse, http_get, scrape (Endpoint and ScrapeResult: endpoint.h).
//
// Never throws: every failure (resolve, connect, timeout, a non-200 status, a
// malformed response or exposition) comes back as `error`, naming the URL.
// Understands Content-Length, chunked transfer encoding and read-to-close
// bodies; asks for the text format (prometheus servers that could negotiate
// protobuf or OpenMetrics answer text/plain; version=0.0.4).
#pragma once

#include <chrono>
#include <string>

#include "scrape/endpoint.h"

namespace weft::scrape {

struct HttpResponse {
  int status = 0;     // 0 when no response head arrived
  std::string body;   // de-chunked
  std::string error;  // empty on a complete response (any status)
};

// One GET; `timeout` bounds connect, send and the whole read together.
HttpResponse http_get(const Endpoint& ep, std::chrono::milliseconds timeout);

ScrapeResult scrape(const Endpoint& ep, std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace weft::scrape
