#include "comm/gloo_mesh.h"

#include <netinet/in.h>

#include <cstdio>
#include <cstring>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/address.h>

#include "comm/tcp_store.h"

namespace weft::comm {
namespace {

using TcpAddress = gloo::transport::tcp::Address;

// A rendezvous context whose transport weft connects itself (Gloo's members
// device_ and transportContext_ are protected).
class MeshContext : public gloo::rendezvous::Context {
 public:
  using gloo::rendezvous::Context::Context;
  void adopt(std::shared_ptr<gloo::transport::Device> device, std::shared_ptr<gloo::transport::Context> tc) {
    device_ = std::move(device);
    transportContext_ = std::move(tc);
  }
};

// A record starts with the lane count and the pairs' shared address (port
// zeroed, room for IPv6), then the ports: [peer in rank order, skipping the
// record's own rank][lane], u16 each.
constexpr size_t kSockaddrBytes = sizeof(sockaddr_in6);
constexpr size_t kHeaderBytes = 4 + kSockaddrBytes;

uint16_t& port_of(sockaddr_storage& ss) {
  return ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(ss).sin6_port
                                  : reinterpret_cast<sockaddr_in&>(ss).sin_port;
}

}  // namespace

std::string mesh_key_prefix(const std::string& name, const std::vector<int>& members) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the member list
  for (int m : members)
    for (int b = 0; b < 4; ++b) {
      h ^= static_cast<uint8_t>(static_cast<uint32_t>(m) >> (8 * b));
      h *= 1099511628211ull;
    }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return "gloo/" + name + "/" + std::to_string(members.size()) + "/" + hex + "/";
}

std::vector<std::shared_ptr<gloo::Context>> connect_full_meshes(
    TcpStore& store, const std::string& prefix, const std::shared_ptr<gloo::transport::Device>& device,
    int rank, int size, int lanes, std::chrono::milliseconds timeout) {
  std::vector<std::shared_ptr<gloo::transport::Context>> transports;
  const uint32_t n_lanes = static_cast<uint32_t>(lanes);
  std::string record(kHeaderBytes + size_t(size - 1) * lanes * 2, '\0');
  std::memcpy(record.data(), &n_lanes, 4);
  sockaddr_storage shared{};
  bool have_shared = false;
  for (int lane = 0; lane < lanes; ++lane) {
    auto tc = device->createContext(rank, size);
    tc->setTimeout(timeout);
    for (int i = 0, adj = 0; i < size; ++i, ++adj) {
      if (i == rank) {
        --adj;
        continue;
      }
      TcpAddress a(tc->createPair(i)->address().bytes());
      // Only the family's own bytes: Gloo leaves the rest of the storage unset.
      sockaddr_storage ss{};
      const sockaddr_storage& got = a.getSockaddr();
      std::memcpy(&ss, &got, got.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
      const uint16_t port = port_of(ss);
      port_of(ss) = 0;
      if (!have_shared) {
        shared = ss;
        have_shared = true;
        std::memcpy(record.data() + 4, &shared, kSockaddrBytes);
      } else if (std::memcmp(&ss, &shared, sizeof ss) != 0) {
        throw CommError("Gloo full mesh: rank " + std::to_string(rank) +
                        "'s pairs listen on different addresses (one device, one address expected)");
      }
      std::memcpy(record.data() + kHeaderBytes + (size_t(adj) * lanes + lane) * 2, &port, 2);
    }
    transports.push_back(std::move(tc));
  }
  store.set(prefix + std::to_string(rank), record);

  // From each peer: its header and the ports of its pairs to this rank.
  std::vector<std::string> parts = store.gather_column(prefix, static_cast<uint32_t>(size),
                                                       static_cast<uint32_t>(rank), kHeaderBytes, n_lanes * 2,
                                                       timeout);

  std::vector<sockaddr_storage> peer_ss(size);
  std::vector<std::string> peer_ports(size);
  for (int i = 0, k = 0; i < size; ++i) {
    if (i == rank) continue;
    const std::string& part = parts[k++];
    uint32_t their_lanes = 0;
    if (part.size() == kHeaderBytes + size_t(lanes) * 2) std::memcpy(&their_lanes, part.data(), 4);
    if (their_lanes != n_lanes)
      throw RendezvousError("Gloo full mesh: malformed address record of rank " + std::to_string(i) + " under " +
                            prefix + " (ranks disagree on comm.lanes or the group's size?)");
    peer_ss[i] = sockaddr_storage{};
    std::memcpy(&peer_ss[i], part.data() + 4, kSockaddrBytes);
    peer_ports[i] = part.substr(kHeaderBytes);
  }
  std::vector<std::shared_ptr<gloo::Context>> out;
  for (int lane = 0; lane < lanes; ++lane) {
    // Gloo's own order: lane by lane, peers in rank order.
    for (int i = 0; i < size; ++i) {
      if (i == rank) continue;
      sockaddr_storage ss = peer_ss[i];
      std::memcpy(&port_of(ss), peer_ports[i].data() + lane * 2, 2);
      transports[lane]->getPair(i)->connect(TcpAddress(ss).bytes());
    }
    auto context = std::make_shared<MeshContext>(rank, size);
    context->setTimeout(timeout);
    context->adopt(device, transports[lane]);
    out.push_back(std::move(context));
  }
  return out;
}

}  // namespace weft::comm
