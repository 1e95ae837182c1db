#include "node/ip_pool.h"

#include <cstdio>

namespace weft::node {

std::string ipv4_to_string(uint32_t ip) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 0xff, (ip >> 8) & 0xff, ip & 0xff);
  return buf;
}

std::optional<uint32_t> ipv4_from_string(const std::string& s) {
  unsigned a, b, c, d;
  char tail;
  if (std::sscanf(s.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) != 4 || a > 255 || b > 255 || c > 255 || d > 255)
    return std::nullopt;
  return a << 24 | b << 16 | c << 8 | d;
}

std::optional<std::string> IpPool::allocate() {
  for (uint32_t tries = 0; tries < 65534; ++tries) {
    const uint32_t host = next_;
    next_ = next_ >= 65534 ? 1 : next_ + 1;
    if ((host & 0xff) == 0 || (host & 0xff) == 255) continue;  // keep .0/.255 out of the way
    if (used_.insert(host).second) return ipv4_to_string(base_ | host);
  }
  return std::nullopt;
}

bool IpPool::reserve(const std::string& ip) {
  auto v = ipv4_from_string(ip);
  if (!v || (*v & 0xffff0000u) != base_) return false;
  used_.insert(*v & 0xffff);
  if ((*v & 0xffff) >= next_) next_ = (*v & 0xffff) + 1 > 65534 ? 1 : (*v & 0xffff) + 1;
  return true;
}

void IpPool::release(const std::string& ip) {
  auto v = ipv4_from_string(ip);
  if (v && (*v & 0xffff0000u) == base_) used_.erase(*v & 0xffff);
}

}  // namespace weft::node
