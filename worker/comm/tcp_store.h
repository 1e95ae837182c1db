// weft comm: the TCP rendezvous key-value store (docs/architecture/rendezvous.md).
// Rank 0 runs a TcpStoreServer at MASTER_ADDR:MASTER_PORT; every rank
// (rank 0 included) talks to it through a TcpStore client. Operations: set,
// get (waits until the key exists), multi_get (waits until all keys exist and
// returns them in one reply), add (atomic counter), wait for keys. The wire
// format is comm/tcp_store_wire.h.
//
// Invariants: a client only talks to a server holding the same token (checked
// once at connect; a mismatch is an immediate RendezvousError, never retried,
// and the refusal tells the client nothing about the store or its job);
// every client key is prefixed with "attempt/<WEFT_ATTEMPT>/" so two attempts
// of a job never see each other's keys; clients retry DNS resolution and
// connect with backoff until the rendezvous timeout, so ranks may start in any
// order. Values are opaque bytes.
//
// The server faces whatever can reach MASTER_PORT, so nothing a peer sends
// before its token is checked costs more than a few KiB: one thread serves
// every connection from an epoll loop, buffers grow only with bytes that really
// arrived, a hello is at most kMaxHello bytes, a connection that has not
// presented its token within hello_timeout is closed, and at most
// max_pending such connections are held (a new one displaces the oldest).
// Once the gang has formed (close_membership) new connections are refused;
// the members already connected are still served. Members are bounded too:
// the keys and values held together stay under max_bytes (a set or add past
// it is refused, the store unchanged), and an add that would overflow int64
// is refused.
//
// A rank that will not join (bad config, launch environment or device; a
// RANK given twice, a WORLD_SIZE unlike rank 0's) posts a refusal (refuse()):
// every read still waiting in its attempt, and every later one, is answered
// with it, so the gang exits 1 naming the rank and its reason within seconds
// instead of waiting out the rendezvous timeout (comm/rendezvous_refusal.h).
//
// Cost at N ranks (docs/scale.md, "Rendezvous store"): one event costs work
// for the connection it concerns only. A parked get, wait or multi_get is
// indexed under the first of its keys still missing, so a set touches only
// the requests waiting for that key, and deadlines sit in one ordered index.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"

namespace weft::comm {

namespace store_wire {
struct Reader;
}

struct RendezvousError : CommError {
  using CommError::CommError;
};

// The store answered and refused this rank's WEFT_RDZV_TOKEN: a launch
// mistake, not a transient failure, so the worker exits 1 (not retried).
struct TokenRejectedError : RendezvousError {
  using RendezvousError::RendezvousError;
};

// A rank of this gang refused to join and said why (TcpStore::refuse): bad
// input somewhere in the gang, not a lost peer, so every rank exits 1. The
// message names the rank and its reason.
struct RankRefusedError : CommError {
  using CommError::CommError;
};

// Largest hello a client may send (token and job description).
inline constexpr uint32_t kMaxHello = 4096;
// Largest request or reply after the token check: values are addresses and
// ids, never training data.
inline constexpr uint32_t kMaxStoreValue = 16u << 20;

// What the keys and values of a gang of `world` ranks with comm.lanes `lanes`
// may take in the store: a floor for the small records every gang writes,
// plus, per rank, its Gloo address records (five groups, one cell per peer
// and mesh; docs/scale.md) and a few KiB of settings, verdicts and claims.
inline constexpr size_t kStoreFloorBytes = 64u << 20;
constexpr size_t store_bytes_for(size_t world, size_t lanes) {
  return kStoreFloorBytes + world * (5 * (256 + 2 * (lanes + 1) * world) + 4096);
}

struct TcpStoreServerOptions {
  // The job the store belongs to, as a short description ("world 4,
  // launched by pid 812"), for rank 0's log only: a rank whose token is
  // refused is logged with its own, so the log tells a port shared with
  // another job from a wrong token. Never sent to a client.
  std::string job;
  // Keys and values held at once, each entry counted with 64 bytes of
  // bookkeeping; a set or add past it is refused.
  size_t max_bytes = kStoreFloorBytes;
  // A connection must have presented its token within this time.
  std::chrono::milliseconds hello_timeout{5000};
  // Connections still before their token check held at once.
  size_t max_pending = 64;
};

class TcpStoreServer {
 public:
  // Listens on bind_host:port (bind_host "" = all interfaces, port 0 = any
  // free port). Throws RendezvousError naming the address when it cannot.
  TcpStoreServer(const std::string& bind_host, uint16_t port, std::string token,
                 TcpStoreServerOptions options = TcpStoreServerOptions());
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const { return port_; }

  // The gang has formed: every later hello, even with the right token, is
  // answered "membership closed" and the connection closed. Members already
  // connected keep being served.
  void close_membership();

  // Connections open now, how many of them have passed the token check, the
  // bytes the keys and values hold (as max_bytes counts them), and how many
  // connections have posted a refusal or been answered with one.
  struct Counts {
    size_t open = 0;
    size_t members = 0;
    size_t bytes = 0;
    size_t heard_refusal = 0;
    size_t members_unheard = 0;  // after a refusal: members not told yet
  };
  Counts counts() const;

  // After a refusal: waits until `connections` connections have posted one or
  // been told (every rank of the gang, rank 0's own client included) and no
  // member still connected has not, so that a rank 0 on its way out leaves
  // its store up long enough for the others to learn why. Gives up at
  // `limit`, or once every connected member has heard and nothing has
  // changed for `settle` (a rank 0 whose WORLD_SIZE is larger than the gang
  // would otherwise wait out `limit` for ranks that do not exist). True when
  // `connections` heard.
  bool wait_until_heard(size_t connections, std::chrono::milliseconds limit,
                        std::chrono::milliseconds settle = std::chrono::seconds(5)) const;

 private:
  struct Conn;
  struct State;  // the loop thread's alone: connections, keys, waiter indexes
  void loop();
  void accept_new();
  bool read_some(Conn& c);
  void parse(Conn& c);
  void handle(Conn& c, const std::string& msg);
  void hello(Conn& c, const std::string& msg);
  void park(Conn& c, uint8_t cmd, std::vector<std::string> keys, int64_t wait_ms);
  bool advance(Conn& c);
  std::string wait_key(const Conn& c, size_t j) const;
  void answer(Conn& c, bool timed_out);
  void key_written(const std::string& key);
  bool store_value(Conn& c, const std::string& key, std::string value, std::string& resp);
  void refuse(Conn& c, std::string scope, std::string who, std::string reason);
  bool answer_if_refused(Conn& c, const std::string& key);
  void expire_deadlines();
  void flush(Conn& c);
  void close_conn(Conn& c);
  void publish_counts();
  void log_refusal(const std::string& what);

  const std::string token_;
  const TcpStoreServerOptions opt_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop and close_membership wake the loop
  int epoll_fd_ = -1;
  uint16_t port_ = 0;

  std::atomic<bool> stop_{false};
  std::atomic<bool> membership_closed_{false};
  std::unique_ptr<State> st_;
  std::chrono::steady_clock::time_point next_refusal_log_{};
  size_t refusals_unlogged_ = 0;
  mutable std::mutex counts_mu_;
  Counts counts_;
  std::thread thread_;
};

struct StoreOptions {
  std::string host;       // MASTER_ADDR (name or address)
  uint16_t port = 0;      // MASTER_PORT
  std::string token;      // WEFT_RDZV_TOKEN (may be empty; must match the server's)
  std::string job;        // this rank's job description, for rank 0's log (TcpStoreServerOptions::job)
  int attempt = 0;        // WEFT_ATTEMPT -> key prefix
  std::chrono::milliseconds timeout{600000};  // rendezvous timeout
};

class TcpStore {
 public:
  // Connects (retrying DNS and connect with backoff until options.timeout) and
  // presents the token. Throws RendezvousError on timeout or when the gang
  // has already formed, TokenRejectedError when the token is refused.
  // Every read below throws RankRefusedError once a rank of this attempt has
  // refused to join (refuse()).
  explicit TcpStore(StoreOptions options);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value);
  // Waits until the key exists (at most the rendezvous timeout, or `timeout`).
  std::string get(const std::string& key);
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
  // Waits until every key exists (at most `timeout`) and returns their values
  // in order, in one request: a full-mesh rendezvous reads its N-1 peers'
  // records at the cost of one round trip. Throws RendezvousError naming a
  // missing key.
  std::vector<std::string> multi_get(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // The same for slices: bytes [offset, offset+length) of each key's value
  // (clamped to the value), so a rank reads only its part of a peer's record.
  struct Slice {
    std::string key;
    uint32_t offset = 0;
    uint32_t length = 0xffffffffu;  // to the end of the value
  };
  std::vector<std::string> multi_get_slices(const std::vector<Slice>& slices, std::chrono::milliseconds timeout);
  // Each of n ranks set prefix+"<rank>" to a row: `head` bytes, then one
  // `width`-byte cell per other rank in rank order. Waits until every other
  // rank's row exists (at most `timeout`) and returns, in rank order skipping
  // `self`, each row's head followed by its cell for `self`: a full-mesh
  // rendezvous in one request of O(1) bytes and a reply of O(n).
  std::vector<std::string> gather_column(const std::string& prefix, uint32_t n, uint32_t self, uint32_t head,
                                         uint32_t width, std::chrono::milliseconds timeout);
  // Adds delta to the integer at key (missing = 0) and returns the new value.
  // Throws RendezvousError when the value is not an integer or the sum
  // would overflow int64 (the value stays), or the store is full.
  int64_t add(const std::string& key, int64_t delta);
  // This rank (`who`: "rank 3") will not join, because of `reason`: every
  // rank of this attempt waiting in the store, and every one that reads it
  // later, gets RankRefusedError naming both.
  void refuse(const std::string& who, const std::string& reason);
  // Waits until all keys exist; throws RendezvousError naming a missing key.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  std::chrono::milliseconds timeout() const { return opt_.timeout; }
  // The local IP address of the connection to the store: the address on the
  // interface that routes to MASTER_ADDR, which peers can reach us at.
  const std::string& local_address() const { return local_addr_; }
  std::string endpoint() const { return opt_.host + ":" + std::to_string(opt_.port); }

 private:
  bool hello();
  std::string request(const std::string& payload, std::chrono::milliseconds server_wait);
  std::string full_key(const std::string& key) const;
  void throw_if_timed_out(const std::string& resp, store_wire::Reader& r, std::chrono::milliseconds timeout) const;

  StoreOptions opt_;
  std::string prefix_;
  std::string local_addr_;
  int fd_ = -1;
  std::mutex mu_;  // one request in flight per client
};

}  // namespace weft::comm
