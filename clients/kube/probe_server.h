// ProbeServer: /healthz and /readyz for the kubelet's probes (200 "ok" or
// 503 with the reason), served on its own port so a slow metrics scrape never
// fails a liveness probe. It runs on the server of the metrics endpoints
// (serving/metrics_server.h): one poll-loop thread, a 5 s deadline for every
// connection and at most 64 open, so idle or slow clients never hold a probe
// (cpprest's listener kept idle connections forever: enough of them took the
// descriptors and the probes failed, and the kubelet would kill the operator).
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace weft {
class MetricsServer;
}

namespace weft::kube {

class ProbeServer {
 public:
  // Each check returns "" when fine, or why not. Throws std::runtime_error
  // naming the address when the port cannot be bound.
  using Check = std::function<std::string()>;
  ProbeServer(const std::string& address, int port, Check healthy, Check ready);
  ~ProbeServer();
  int port() const;

 private:
  std::unique_ptr<MetricsServer> server_;
};

}  // namespace weft::kube
