// What a scrape is asked and what it answers, without the I/O: the scrape
// poller's interface and its tests name these, and only the code that reads
// a rank over the network includes http_scraper.h.
// defines: Endpoint, ScrapeResult.
#pragma once

#include <string>

#include "scrape/prom_text.h"

namespace weft::scrape {

struct Endpoint {
  std::string host;  // IPv4/IPv6 literal or a name getaddrinfo resolves
  int port = 0;
  std::string path = "/metrics";

  std::string url() const;  // http://host:port/path (IPv6 in brackets)
};

struct ScrapeResult {
  Exposition metrics;
  std::string error;  // empty: a 200 response whose body parsed completely
  bool ok() const { return error.empty(); }
};

}  // namespace weft::scrape
