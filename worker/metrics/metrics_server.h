// Serves a prometheus-cpp registry at GET /metrics (text format 0.0.4) from
// one thread of our own, and GET /ready for a readiness probe: 200 once the
// `ready` callback says the rank trains (the worker: it joined the rendezvous
// and finished a step), 503 before.
//
// Why not prometheus::Exposer: Debian's civetweb runs its workers on fixed
// ~100 KiB stacks, and glibc places the static TLS of every loaded library
// (OpenBLAS alone takes 60 KiB, NCCL 12 KiB) inside each thread's stack, so
// the exposer's handler overflowed and crashed the worker on scrape. This
// server's thread has a normal stack and never blocks training: collection
// reads the registry under prometheus-cpp's own locks.
//
// The thread runs a poll loop over every open connection, so a slow or idle
// client never delays another: each connection has a whole-request deadline
// (request read and response sent within `request_deadline` of accept, however
// slowly bytes trickle in), requests are at most 16 KiB, and at most
// `max_connections` are open at once (a new one displaces the oldest).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <prometheus/registry.h>

namespace weft {

struct MetricsServerOptions {
  std::chrono::milliseconds request_deadline{5000};
  size_t max_connections = 64;
  // /ready: called on the server's thread; empty = never ready. Returns
  // whether the rank is ready and sets `why` to the body's one line.
  std::function<bool(std::string* why)> ready;
};

class MetricsServer {
 public:
  // Binds bind_addr:port and starts serving; throws std::runtime_error naming
  // the address when the port cannot be bound.
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
  void serve();
  std::string respond(const std::string& request) const;

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
