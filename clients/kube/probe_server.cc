#include "kube/probe_server.h"

#include <cpprest/http_listener.h>

namespace weft::kube {
namespace http = web::http;

struct ProbeServer::Impl {
  std::unique_ptr<http::experimental::listener::http_listener> listener;
  int port = 0;
};

ProbeServer::ProbeServer(const std::string& address, int port, Check healthy, Check ready)
    : impl_(std::make_unique<Impl>()) {
  impl_->port = port;
  impl_->listener = std::make_unique<http::experimental::listener::http_listener>(
      "http://" + address + ":" + std::to_string(port) + "/");
  impl_->listener->support(http::methods::GET, [healthy, ready](http::http_request req) {
    const std::string path = req.relative_uri().path();
    const Check* check = path == "/healthz" ? &healthy : path == "/readyz" ? &ready : nullptr;
    if (!check) {
      req.reply(http::status_codes::NotFound, "not found\n");
      return;
    }
    std::string why = (*check)();
    if (why.empty()) req.reply(http::status_codes::OK, "ok\n");
    else req.reply(http::status_codes::ServiceUnavailable, why + "\n");
  });
  impl_->listener->open().wait();
}

ProbeServer::~ProbeServer() {
  try {
    impl_->listener->close().wait();
  } catch (const std::exception&) {
    // shutting down anyway
  }
}

int ProbeServer::port() const { return impl_->port; }

}  // namespace weft::kube
