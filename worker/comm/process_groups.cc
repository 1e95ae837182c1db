#include "comm/process_groups.h"

#include <csignal>
#include <cstdlib>

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "comm/gloo_communicator.h"
#include "comm/rendezvous_refusal.h"
#include "comm/solo_communicator.h"
#include "comm/staged_communicator.h"
#include "weft_contract.h"
#ifdef WEFT_HAVE_NCCL
#include "comm/cuda_staging.h"
#include "comm/nccl_communicator.h"
#endif

extern char** environ;

namespace weft::comm {
namespace {

// Who is who, before anything else is compared: a RANK given to two
// processes, or a WORLD_SIZE unlike rank 0's, would leave the ranks waiting
// for peers that never report (rank 0 with WORLD_SIZE 3 waits for a rank 2
// that does not exist) until the rendezvous timeout. The rank that finds the
// problem refuses (TcpStore::refuse), so every rank exits 1 naming it.
void check_membership(TcpStore& store, const ProcessEnv& env) {
  const std::string who = "rank " + std::to_string(env.rank);
  auto refuse = [&](const std::string& reason) {
    store.refuse(who, reason);
    throw RankRefusedError("rendezvous: " + who + " refuses to join: " + reason);
  };
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  if (store.add("rank/" + std::to_string(env.rank) + "/claims", 1) > 1)
    refuse(std::string(contract::kEnvRank) + " " + std::to_string(env.rank) +
           " was given to two processes (this one: pid " + std::to_string(getpid()) + " on " + host +
           "); every rank of a job needs its own " + contract::kEnvRank + " in [0, " + contract::kEnvWorldSize + ")");
  if (env.rank == 0) {
    store.set("world", std::to_string(env.world));
    return;
  }
  const std::string rank0_world = store.get("world");
  if (rank0_world != std::to_string(env.world))
    refuse(std::string(contract::kEnvWorldSize) + " is " + rank0_world + " on rank 0 but " +
           std::to_string(env.world) + " on rank " + std::to_string(env.rank) +
           ": start every rank with the same " + contract::kEnvWorldSize);
}

}  // namespace

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> m;
  for (char** p = environ; p && *p; ++p) {
    std::string kv = *p;
    auto eq = kv.find('=');
    if (eq != std::string::npos) m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

ProcessGroups::~ProcessGroups() {
  // Communicators drain their queues and close their connections first.
  world.reset();
  dp.reset();
  sp.reset();
  wp.reset();
  wdp.reset();
}

std::unique_ptr<ProcessGroups> init_process_groups(const ProcessEnv& env, const GroupOptions& opt) {
  // Gloo writes to peers without MSG_NOSIGNAL: a write to a peer that just
  // died would kill this process with SIGPIPE (exit 141) instead of failing
  // the collective, which the watchdog reports as a lost peer (exit 3).
  std::signal(SIGPIPE, SIG_IGN);
  RankGrid grid(env.world, opt.sp, opt.wp);
  using contract::CommBackend;
  const CommBackend backend = opt.backend;
  if (backend == CommBackend::Auto)
    throw CommError("comm.backend: auto reached the process groups unresolved; the worker config's resolve() makes it "
                    "gloo or nccl");
  if (backend == CommBackend::Nccl && opt.device != Device::CUDA)
    throw CommError("comm.backend: nccl needs device: cuda");
  if (opt.lanes < 1) throw CommError("comm.lanes: must be >= 1, got " + std::to_string(opt.lanes));
#ifndef WEFT_HAVE_NCCL
  if (backend == CommBackend::Nccl) throw CommError("comm.backend: nccl requested but weft was built without CUDA");
  if (backend == CommBackend::Gloo && opt.device == Device::CUDA)
    throw CommError("comm.backend: gloo with device: cuda stages through host memory, but weft was built without CUDA");
#endif

  std::unique_ptr<ProcessGroups> pg(new ProcessGroups(env, grid));
  pg->ctx_ = std::make_unique<CommContext>(opt.timeout, opt.policy);
  pg->ctx_->set_global_rank(env.rank);
  if (backend == CommBackend::Gloo) pg->ctx_->set_network(opt.network);
  if (env.world > 1) {
    // The job's description in the store's hello, for rank 0's log of
    // refused tokens (comm/rendezvous_refusal.h).
    const std::string job = store_job_description(env.world, env.master_addr);
    StoreOptions so;
    so.host = env.master_addr;
    so.port = env.master_port;
    so.token = env.token;
    so.attempt = env.attempt;
    so.job = job;
    so.timeout = opt.rendezvous_timeout;
    if (env.rank == 0) {
      TcpStoreServerOptions server_opt;
      server_opt.job = job;
      server_opt.max_bytes = store_bytes_for(env.world, opt.lanes);
      try {
        pg->server_ = std::make_unique<TcpStoreServer>(store_bind_address(env.bind_addr, env.master_addr),
                                                       env.master_port, env.token, server_opt);
      } catch (const RendezvousError&) {
        // A store of this job (it takes our token) already holds the port:
        // another process was given RANK 0. Anything else is the port's
        // problem, reported as it was.
        std::unique_ptr<TcpStore> other;
        try {
          StoreOptions probe = so;
          probe.timeout = std::chrono::milliseconds(2000);
          other = std::make_unique<TcpStore>(probe);
        } catch (const std::exception&) {
        }
        if (!other) throw;
        const std::string reason = std::string(contract::kEnvRank) + " 0 was given to two processes: the store at " +
                                   other->endpoint() + " is served by another rank 0 of this job (this one: pid " +
                                   std::to_string(getpid()) + ")";
        other->refuse("a second rank 0", reason);
        throw RankRefusedError("rendezvous: rank 0 refuses to join: " + reason);
      }
    }
    pg->store_ = std::make_unique<TcpStore>(so);
  }
  TcpStore* store = pg->store_.get();
  if (store) {
    try {
      check_membership(*store, env);
      // Before any group: ranks that disagree on the settings (comm.lanes,
      // the model) could not even connect their groups the same way.
      if (!opt.shared_settings.empty()) agree_on_settings(*store, env.rank, env.world, opt.shared_settings);
    } catch (const RankRefusedError& e) {
      // Rank 0's store goes when it exits: the ranks that have not heard
      // would see it vanish (exit 3) or never find it. Every rank hears
      // first, within a bound; the refusal is logged at once.
      if (pg->server_) {
        spdlog::error("{}; keeping the store up until every rank has heard", e.what());
        pg->server_->wait_until_heard(env.world,
                                      std::min<std::chrono::milliseconds>(opt.rendezvous_timeout, kRefusalBudget));
      }
      throw;
    }
  }

  RankGroups g = grid.groups_of(env.rank);
  // Every rank creates its groups in the same order, so each group's
  // (blocking) connection step sees all of its members.
  // A group of one rank needs no transport (comm/solo_communicator.h): every
  // group of a one-GPU run, and the size-1 dimensions of an ISP grid.
  int solo = 0;
  auto make = [&](const std::string& name, const std::vector<int>& members) -> CommunicatorPtr {
    if (members.size() == 1) {
      ++solo;
      void* stream = opt.device == Device::CUDA && opt.cuda_compute_stream ? opt.cuda_compute_stream() : nullptr;
      return std::make_shared<SoloCommunicator>(name, env.rank, stream);
    }
#ifdef WEFT_HAVE_NCCL
    if (backend == CommBackend::Nccl) {
      auto c = NcclCommunicator::create(*pg->ctx_, store, name, members, env.rank);
      if (opt.cuda_compute_stream) c->set_compute_stream(static_cast<CUstream_st*>(opt.cuda_compute_stream()));
      return c;
    }
#endif
    if (!pg->device_) {
      std::string bind = !env.bind_addr.empty() ? env.bind_addr
                         : store               ? store->local_address()
                                               : std::string("127.0.0.1");
      pg->device_ = make_gloo_device(bind);
    }
    auto gloo = GlooCommunicator::create(*pg->ctx_, store, pg->device_, name, members, env.rank, opt.lanes);
#ifdef WEFT_HAVE_NCCL
    // CUDA tensors over Gloo: staged through pinned host memory
    // (comm/staged_communicator.h), e.g. several ranks on one GPU.
    if (opt.device == Device::CUDA) {
      if (!pg->staging_)
        pg->staging_ = make_cuda_staging(opt.cuda_compute_stream ? opt.cuda_compute_stream() : nullptr);
      return std::make_shared<StagedCommunicator>(std::move(gloo), pg->staging_);
    }
#endif
    return gloo;
  };
  pg->world = make("world", g.world);
  pg->dp = make("dp", g.dp);
  pg->sp = make("sp", g.sp);
  pg->wp = make("wp", g.wp);
  pg->wdp = make("wdp", g.wdp);
  if (store) store->add("ready", 1);
  // Every rank is connected now (the world group's rendezvous read a key each
  // rank wrote through its connection), so the store refuses newcomers; the
  // members keep being served.
  if (pg->server_) pg->server_->close_membership();
  const std::string name(contract::mode_name(backend));
  const std::string how = pg->staging_ ? name + ", CUDA tensors staged through host memory" : name;
  spdlog::info("comm: rank {}/{} ready ({}; dp {}, sp {}, wp {}, wdp {}; {} of the 5 groups have one rank and run "
               "without {})",
               env.rank, env.world, how, g.dp.size(), g.sp.size(), g.wp.size(), g.wdp.size(), solo, name);
  return pg;
}

}  // namespace weft::comm
