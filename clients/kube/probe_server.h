// ProbeServer: /healthz and /readyz for the kubelet's probes (200 "ok" or
// 503 with the reason), served on its own port so a slow metrics scrape never
// fails a liveness probe.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace weft::kube {

class ProbeServer {
 public:
  // Each check returns "" when fine, or why not.
  using Check = std::function<std::string()>;
  ProbeServer(const std::string& address, int port, Check healthy, Check ready);
  ~ProbeServer();
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft::kube
