// Serves a prometheus-cpp registry at GET /metrics (text format 0.0.4) from
// one thread of our own.
//
// Why not prometheus::Exposer: Debian's civetweb runs its workers on fixed
// ~100 KiB stacks, and glibc places the static TLS of every loaded library
// (OpenBLAS alone takes 60 KiB, NCCL 12 KiB) inside each thread's stack, so
// the exposer's handler overflowed and crashed the worker on scrape. This
// server's thread has a normal stack, serves one connection at a time (a
// scrape is small and rare), and never blocks training: collection reads the
// registry under prometheus-cpp's own locks.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include <prometheus/registry.h>

namespace weft {

class MetricsServer {
 public:
  // Binds bind_addr:port and starts serving; throws std::runtime_error naming
  // the address when the port cannot be bound.
  MetricsServer(std::shared_ptr<prometheus::Registry> registry, const std::string& bind_addr,
                int port);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }

 private:
  void serve();
  void handle(int fd);

  std::shared_ptr<prometheus::Registry> registry_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace weft
