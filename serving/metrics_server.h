// Serves a prometheus-cpp registry at GET /metrics (text format 0.0.4) from
// one thread of our own, GET /ready for a readiness probe: 200 once the
// `ready` callback says the rank trains (the worker: it joined the rendezvous
// and finished a step), 503 before; and any further check paths the same way
// (the operator's /healthz and /readyz, kube/probe_server.h).
//
// weft-worker serves each rank's metrics with it, weft-operator its own
// /metrics and its probes: it lives in serving/ (weft_serving), outside both
// sides' layering, and needs only POSIX and prometheus-cpp's core.
//
// Why not prometheus::Exposer: Debian's civetweb runs its workers on fixed
// ~100 KiB stacks, and glibc places the static TLS of every loaded library
// (OpenBLAS alone takes 60 KiB, NCCL 12 KiB) inside each thread's stack, so
// the exposer's handler overflowed and crashed the worker on scrape. And
// each of its few threads serves one connection at a time, waiting out an
// idle keep-alive client: the operator's exposer (2 threads, 120 s keep-alive)
// made every scrape wait 9-40 s behind two idle clients (issue #70). This
// server's thread has a normal stack and never blocks training: collection
// reads the registry under prometheus-cpp's own locks.
//
// The thread ("weft-metrics") runs a poll loop over every open connection, so
// a slow or idle client never delays another:
// - each connection has a whole-request deadline (request read and response
//   sent within `request_deadline` of accept, however slowly bytes trickle
//   in; one still sending its request then gets a best-effort 408);
// - a request is at most 16 KiB (request line 8 KiB): more is a 431 (414);
//   a malformed one (binary bytes, no HTTP/1.x version, a bad header or
//   Content-Length, Transfer-Encoding) is a 400 as soon as it shows; methods
//   other than GET and HEAD are a 405; every response closes the connection;
// - after the response the connection is half-closed and what the client
//   still sends is dropped (at most 2 s and 16 MiB), so it reads the response
//   rather than a reset;
// - at most `max_connections` are open at once, and fewer when descriptors
//   run short (a quarter of RLIMIT_NOFILE, at least 32, stays free for
//   training): a new one displaces an answered connection, else the oldest
//   still sending its request, else the oldest being answered; when no
//   descriptor is left at all, the listener rests 100 ms instead of spinning;
// - the thread uses at most a tenth of a core on average (bursts of 250 ms of
//   CPU): clients hammering the port wait in the kernel's queue instead of
//   taking training's CPU. A scrape a second costs far less.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <prometheus/registry.h>

namespace weft {

// A check: called on the server's thread; returns whether all is well and
// sets `why` to the body's one line (200 when true, 503 when false).
using ServerCheck = std::function<bool(std::string* why)>;

struct MetricsServerOptions {
  std::chrono::milliseconds request_deadline{5000};
  size_t max_connections = 64;
  // /ready; empty = never ready.
  ServerCheck ready;
  // Further paths answered by a check, e.g. {"/healthz", ...}.
  std::map<std::string, ServerCheck> checks;
};

class MetricsServer {
 public:
  // Binds bind_addr:port and starts serving; throws std::runtime_error naming
  // the address when the port cannot be bound. A null registry serves no
  // /metrics (404): checks only.
  MetricsServer(std::shared_ptr<prometheus::Registry> registry, const std::string& bind_addr, int port,
                MetricsServerOptions options = MetricsServerOptions());
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  // Connections open now (for tests and the probe).
  size_t open_connections() const { return open_.load(); }

 private:
  struct Conn;
  struct Loop;
  void serve();
  bool parse(Conn& c) const;
  std::string respond(const std::string& method, const std::string& path) const;

  std::shared_ptr<prometheus::Registry> registry_;
  const MetricsServerOptions opt_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> open_{0};
  std::thread thread_;
};

}  // namespace weft
