#include "kube/probe_server.h"

#include "metrics_server.h"

namespace weft::kube {

namespace {

ServerCheck answer(ProbeServer::Check check) {
  return [check = std::move(check)](std::string* why) {
    *why = check();
    if (!why->empty()) return false;
    *why = "ok";
    return true;
  };
}

}  // namespace

ProbeServer::ProbeServer(const std::string& address, int port, Check healthy, Check ready) {
  MetricsServerOptions opt;
  opt.checks = {{"/healthz", answer(std::move(healthy))}, {"/readyz", answer(std::move(ready))}};
  server_ = std::make_unique<MetricsServer>(nullptr, address, port, std::move(opt));
}

ProbeServer::~ProbeServer() = default;

int ProbeServer::port() const { return server_->port(); }

}  // namespace weft::kube
