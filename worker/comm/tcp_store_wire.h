// weft comm: the rendezvous store's wire format, shared by TcpStore,
// TcpStoreServer and the store benchmark (tests/bench/store_bench.cc).
// defines: Cmd, Status, put_u32, put_i64, put_str, framed, Reader, addr_string
//
// Every message is a u32 length (host order; both ends are the same build)
// followed by that many bytes. Requests start with a command byte, replies
// with a status byte. Strings are a u32 length and the bytes.
//   hello     : kHello str token, str job          -> status (a refused token
//               is answered with the status byte alone: nothing about the
//               store before the token check)
//   set       : kSet str key, str value             -> status | kFull i64 limit
//   get       : kGet str key, i64 wait_ms           -> status str value | kTimedOut
//   add       : kAdd str key, i64 delta             -> status i64 value | kFull i64 limit
//               | kNotACounter str value (not an integer, or value + delta
//               overflows int64: refused, the value unchanged)
//   wait      : kWait u32 n, n x str key, i64 ms    -> status | kTimedOut str missing
//   multi_get : kMultiGet u32 n, n x (str key, u32 offset, u32 length), i64 ms
//               -> status u32 n, n x str bytes [offset, offset+length) of the
//                  value (clamped to its size; kWholeValue: to its end)
//               | kTimedOut str missing
//   gather    : kGather str prefix, u32 n, u32 self, u32 head, u32 width, i64 ms
//               waits for keys prefix+"0" .. prefix+"<n-1>" except prefix+"<self>"
//               -> status u32 n-1, then per key i in order: str of its bytes
//                  [0, head) followed by [head + c*width, +width), c = self's
//                  place among i's peers (self < i ? self : self-1)
//               | kTimedOut str missing
//               Each rank published a row of a matrix (a header and one cell
//               per peer); a rank reads its column in a request of O(1) bytes.
//   refuse    : kRefuse str scope, str who, str reason -> status
//               a rank will not join: every get, wait, multi_get and gather
//               whose (first) key starts with `scope` (the attempt's prefix),
//               parked now or sent later, is answered kRefused str who,
//               str reason of the first refusal under that scope.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace weft::comm::store_wire {

enum Cmd : uint8_t {
  kHello = 1, kSet = 2, kGet = 3, kAdd = 4, kWait = 5, kMultiGet = 6, kGather = 7, kRefuse = 8
};
// A multi_get length that asks for the rest of the value.
inline constexpr uint32_t kWholeValue = 0xffffffffu;

enum Status : uint8_t {
  kOk = 0, kTimedOut = 1, kBadToken = 2, kBadRequest = 3, kMembershipClosed = 4,
  kFull = 5, kNotACounter = 6, kRefused = 7
};

inline void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
inline void put_i64(std::string& s, int64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
inline void put_str(std::string& s, const std::string& v) {
  put_u32(s, static_cast<uint32_t>(v.size()));
  s += v;
}

inline std::string framed(const std::string& m) {
  std::string f;
  put_u32(f, static_cast<uint32_t>(m.size()));
  return f + m;
}

// Cursor over a received message; any overrun marks it bad.
struct Reader {
  const std::string& s;
  size_t pos = 0;
  bool bad = false;
  bool take(void* out, size_t n) {
    if (pos + n > s.size()) return !(bad = true);
    std::memcpy(out, s.data() + pos, n);
    pos += n;
    return true;
  }
  uint8_t u8() { uint8_t v = 0; take(&v, 1); return v; }
  uint32_t u32() { uint32_t v = 0; take(&v, 4); return v; }
  int64_t i64() { int64_t v = 0; take(&v, 8); return v; }
  std::string str() {
    uint32_t n = u32();
    if (bad || pos + n > s.size()) { bad = true; return {}; }
    std::string v = s.substr(pos, n);
    pos += n;
    return v;
  }
};

// The numeric address of a socket address ("10.0.0.7", "::1").
inline std::string addr_string(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  return buf;
}

}  // namespace weft::comm::store_wire
