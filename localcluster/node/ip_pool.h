// Loopback pod IPs: every pod gets its own address in 127.0.0.0/8 (Linux
// routes the whole block to `lo`), so ranks on one machine bind the same
// ports without clashing, as pods in their own network namespaces would.
// Addresses are handed out round-robin from 127.<base>.0.1 upward, so a
// released address is not reused until the range wraps (a new rank 0 never
// gets the address a stale peer may still hold).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

namespace weft::node {

class IpPool {
 public:
  explicit IpPool(int second_octet = 1) : base_(static_cast<uint32_t>(127u << 24 | (second_octet & 0xff) << 16)) {}
  // The next free address, or nullopt when all 65534 are taken.
  std::optional<std::string> allocate();
  // Marks an address taken (pods adopted after a restart); false if outside the pool.
  bool reserve(const std::string& ip);
  void release(const std::string& ip);
  size_t in_use() const { return used_.size(); }

 private:
  uint32_t base_;
  uint32_t next_ = 1;  // host part of the next candidate, in [1, 65534]
  std::set<uint32_t> used_;
};

std::string ipv4_to_string(uint32_t ip);
std::optional<uint32_t> ipv4_from_string(const std::string& s);

}  // namespace weft::node
