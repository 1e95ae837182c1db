// weft comm: the TCP rendezvous key-value store (docs/architecture.md, "Rendezvous").
// Rank 0 runs a TcpStoreServer at MASTER_ADDR:MASTER_PORT; every rank
// (rank 0 included) talks to it through a TcpStore client. Operations: set,
// get (waits until the key exists), add (atomic counter), wait for keys.
//
// Invariants: a client only talks to a server holding the same token (checked
// once at connect; a mismatch is an immediate RendezvousError, never retried);
// every client key is prefixed with "attempt/<WEFT_ATTEMPT>/" so two attempts
// of a job never see each other's keys; clients retry DNS resolution and
// connect with backoff until the rendezvous timeout, so ranks may start in any
// order. Values are opaque bytes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"

namespace weft::comm {

struct RendezvousError : CommError {
  using CommError::CommError;
};

// The store answered and refused this rank's WEFT_RDZV_TOKEN: a launch
// mistake, not a transient failure, so the worker exits 1 (not retried).
struct TokenRejectedError : RendezvousError {
  using RendezvousError::RendezvousError;
};

class TcpStoreServer {
 public:
  // Listens on bind_host:port (bind_host "" = all interfaces, port 0 = any
  // free port). Throws RendezvousError naming the address when it cannot.
  TcpStoreServer(const std::string& bind_host, uint16_t port, std::string token);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const { return port_; }

 private:
  void accept_loop();
  void serve(int fd);

  const std::string token_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;  // signalled on every set/add and on stop
  bool stop_ = false;
  std::map<std::string, std::string> kv_;
  std::vector<int> client_fds_;
  std::vector<std::thread> client_threads_;
  std::thread acceptor_;
};

struct StoreOptions {
  std::string host;       // MASTER_ADDR (name or address)
  uint16_t port = 0;      // MASTER_PORT
  std::string token;      // WEFT_RDZV_TOKEN (may be empty; must match the server's)
  int attempt = 0;        // WEFT_ATTEMPT -> key prefix
  std::chrono::milliseconds timeout{600000};  // rendezvous timeout
};

class TcpStore {
 public:
  // Connects (retrying DNS and connect with backoff until options.timeout) and
  // presents the token. Throws RendezvousError on timeout or token mismatch.
  explicit TcpStore(StoreOptions options);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value);
  // Waits until the key exists (at most the rendezvous timeout, or `timeout`).
  std::string get(const std::string& key);
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
  // Adds delta to the integer at key (missing = 0) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // Waits until all keys exist; throws RendezvousError naming a missing key.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  std::chrono::milliseconds timeout() const { return opt_.timeout; }
  // The local IP address of the connection to the store: the address on the
  // interface that routes to MASTER_ADDR, which peers can reach us at.
  const std::string& local_address() const { return local_addr_; }
  std::string endpoint() const { return opt_.host + ":" + std::to_string(opt_.port); }

 private:
  std::string request(const std::string& payload, std::chrono::milliseconds server_wait);
  std::string full_key(const std::string& key) const;

  StoreOptions opt_;
  std::string prefix_;
  std::string local_addr_;
  int fd_ = -1;
  std::mutex mu_;  // one request in flight per client
};

}  // namespace weft::comm
