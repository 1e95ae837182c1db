#include "comm/rendezvous_refusal.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <memory>

#include <spdlog/spdlog.h>

#include "comm/tcp_store.h"
#include "weft_contract.h"

namespace weft::comm {
namespace {

bool is_loopback_name(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string text(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

// The variable as a whole number in [lo, hi], or `bad` (unset: `unset`).
int64_t number(const std::map<std::string, std::string>& env, const char* name, int64_t unset, int64_t bad,
               int64_t lo, int64_t hi) {
  auto it = env.find(name);
  if (it == env.end()) return unset;
  const std::string& s = it->second;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return bad;
  return v;
}

}  // namespace

std::string store_bind_address(const std::string& bind_addr, const std::string& master_addr) {
  if (!bind_addr.empty()) return bind_addr;
  return is_loopback_name(master_addr) ? master_addr : std::string();
}

std::string store_job_description(int world, const std::string& master_addr) {
  // Ranks of one loopback job share their launcher (weft-run); pods, each
  // with its own MASTER_ADDR, only the world size.
  return "world " + std::to_string(world) +
         (is_loopback_name(master_addr) ? ", launched by pid " + std::to_string(getppid()) : "");
}

RefusalContact refusal_contact(const std::map<std::string, std::string>& env) {
  using namespace contract;
  RefusalContact c;
  c.world = static_cast<int>(number(env, kEnvWorldSize, 1, 0, 1, std::numeric_limits<int>::max()));
  const int64_t rank = number(env, kEnvRank, 0, -1, 0, std::numeric_limits<int>::max());
  c.who = rank >= 0 ? "rank " + std::to_string(rank) : "the rank with " + std::string(kEnvRank) + "='" +
                                                           text(env, kEnvRank).substr(0, 64) + "'";
  c.hosts_store = rank == 0;
  c.master_addr = text(env, kEnvMasterAddr);
  c.master_port = static_cast<uint16_t>(number(env, kEnvMasterPort, 0, 0, 1, 65535));
  c.attempt = static_cast<int>(number(env, kEnvAttempt, 0, 0, 0, int64_t{1} << 30));
  c.token = text(env, kEnvRdzvToken);
  c.bind_addr = text(env, kEnvBindAddr);
  return c;
}

std::string announce_refusal(const RefusalContact& c, const std::string& reason, std::chrono::milliseconds budget) {
  if (!c.reachable()) return "";
  const std::string where = c.master_addr + ":" + std::to_string(c.master_port);
  const std::string job = store_job_description(c.world, c.master_addr);
  std::unique_ptr<TcpStoreServer> server;
  if (c.hosts_store) {
    try {
      TcpStoreServerOptions so;
      so.job = job;
      server = std::make_unique<TcpStoreServer>(store_bind_address(c.bind_addr, c.master_addr), c.master_port,
                                                c.token, so);
    } catch (const RendezvousError&) {
      // The port is taken: by this job's other rank 0 (RANK given twice),
      // which hears this refusal through it, or by another job, which
      // refuses the token below.
    }
  }
  StoreOptions so;
  so.host = c.master_addr;
  so.port = c.master_port;
  so.token = c.token;
  so.job = job;
  so.attempt = c.attempt;
  so.timeout = server ? budget : std::min<std::chrono::milliseconds>(budget, kRefusalFindStore);
  try {
    TcpStore store(so);
    store.refuse(c.who, reason);
  } catch (const std::exception& e) {
    return "could not tell the other ranks: " + std::string(e.what());
  }
  if (!server) return "told the other ranks through the store at " + where;
  // Every rank, this one included, must have heard before the store goes.
  const size_t want = c.world > 0 ? static_cast<size_t>(c.world) : std::numeric_limits<size_t>::max();
  if (server->wait_until_heard(want, budget))
    return "told the other ranks through this rank's store at " + where + "; all " + std::to_string(c.world) +
           " ranks heard";
  return fmt::format("told the other ranks through this rank's store at {}; {} of {} ranks heard within {:.0f} s "
                     "(the others never reached it)",
                     where, server->counts().heard_refusal, c.world > 0 ? std::to_string(c.world) : "?",
                     budget.count() / 1000.0);
}

}  // namespace weft::comm
