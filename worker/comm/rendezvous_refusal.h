// weft comm: a rank that will not join tells the gang why
// (docs/architecture/rendezvous.md, "Refusals").
// defines: RefusalContact, refusal_contact, announce_refusal,
//          store_bind_address, store_job_description
//
// A rank that fails its own checks before the rendezvous (its config, its
// launch environment, its device) used to just exit: its peers, waiting in
// the store, waited out comm.rendezvous_timeout_s and exited 3, a gang restart
// where the cause was bad input. announce_refusal posts the reason in the
// store instead (TcpStore::refuse), bounded by a budget; every rank waiting
// there, and every rank that reads the store later, exits 1 naming it.
//
// Rank 0 hosts the store in its own process (process_groups.cc), so a
// refusing rank 0 still starts it, posts its refusal there and keeps serving
// until every rank has heard (posted a refusal of its own or been told) or
// the budget has passed. A rank 0 that hears another rank's refusal waits the
// same way before it exits (init_process_groups).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace weft::comm {

// How long a rank 0 on its way out keeps its store up for ranks that have not
// heard yet (at most; comm.rendezvous_timeout_s when shorter).
inline constexpr std::chrono::seconds kRefusalBudget{30};
// How long a refusing rank other than 0 looks for the store: rank 0 may
// still be starting (a CUDA context takes seconds), but a rank alone must not
// wait long for a store that will never come.
inline constexpr std::chrono::seconds kRefusalFindStore{10};

// Where the store is, read leniently from the launch environment: a rank
// refuses precisely because its environment may be wrong, so each variable is
// read on its own and a bad one leaves unknown only what needs it.
struct RefusalContact {
  std::string who;           // "rank 3"; "the rank with RANK='x'" when RANK is not a rank
  bool hosts_store = false;  // RANK is 0: this rank serves the store
  int world = 0;             // WORLD_SIZE; 0 when it is not a number
  std::string master_addr;   // MASTER_ADDR
  uint16_t master_port = 0;  // MASTER_PORT; 0 when unset or not a port
  int attempt = 0;           // WEFT_ATTEMPT (0 when not a number)
  std::string token;         // WEFT_RDZV_TOKEN
  std::string bind_addr;     // WEFT_BIND_ADDR
  // A gang of several ranks whose store can be named.
  bool reachable() const { return world != 1 && !master_addr.empty() && master_port != 0; }
};
RefusalContact refusal_contact(const std::map<std::string, std::string>& env);

// Posts `reason` for `contact.who` in the gang's store (started here first
// when this rank hosts it, and then kept up for at most `budget`; otherwise
// looked for for at most min(budget, kRefusalFindStore)); best-effort. Returns what
// happened, for the log: which store was told and how many ranks heard, or
// why none could be.
std::string announce_refusal(const RefusalContact& contact, const std::string& reason,
                             std::chrono::milliseconds budget);

// The address rank 0's store binds: WEFT_BIND_ADDR when given; on loopback
// MASTER_ADDR itself (tests, weft-run); in a pod all interfaces ("": rank 0's
// own DNS name may not resolve yet).
std::string store_bind_address(const std::string& bind_addr, const std::string& master_addr);
// The job's description for the store's log ("world 4, launched by pid 812"
// on loopback, "world 4" in pods): a refused token is logged with it.
std::string store_job_description(int world, const std::string& master_addr);

}  // namespace weft::comm
