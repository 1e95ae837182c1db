#include "comm/process_groups.h"

#include <csignal>
#include <cstdlib>

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "comm/gloo_communicator.h"
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

bool is_loopback_name(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
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
    // The job's description in the store's hello: a rank refused by a store
    // whose description differs is told the port belongs to another job.
    // Ranks of one loopback job share their launcher (weft-run); pods, each
    // with its own MASTER_ADDR, only the world size.
    const std::string job = "world " + std::to_string(env.world) +
                            (is_loopback_name(env.master_addr) ? ", launched by pid " + std::to_string(getppid()) : "");
    if (env.rank == 0) {
      // WEFT_BIND_ADDR (the pod's own address) when given; else on loopback
      // serve only loopback (tests, weft-run); in a pod, all interfaces:
      // rank 0's own DNS name may not resolve yet.
      std::string bind = !env.bind_addr.empty()                ? env.bind_addr
                         : is_loopback_name(env.master_addr) ? env.master_addr
                                                             : "";
      TcpStoreServerOptions server_opt;
      server_opt.job = job;
      pg->server_ = std::make_unique<TcpStoreServer>(bind, env.master_port, env.token, server_opt);
    }
    StoreOptions so;
    so.host = env.master_addr;
    so.port = env.master_port;
    so.token = env.token;
    so.attempt = env.attempt;
    so.job = job;
    so.timeout = opt.rendezvous_timeout;
    pg->store_ = std::make_unique<TcpStore>(so);
  }
  TcpStore* store = pg->store_.get();
  // Before any group: ranks that disagree on the settings (comm.lanes, the
  // model) could not even connect their groups the same way.
  if (store && !opt.shared_settings.empty()) agree_on_settings(*store, env.rank, env.world, opt.shared_settings);

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
