// A scripted HTTP/1.1 server on 127.0.0.1 for wire-level KubeApi tests only
// (chunk boundaries, malformed bodies, retry on 429/5xx). Reconcile
// behaviour is tested against the real API server, never against this.
// Each connection serves one request and closes.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/net.h"

namespace weft::kube::testing {

struct FakeResponse {
  FakeResponse() = default;
  FakeResponse(int s, std::vector<std::pair<std::string, std::string>> h, std::string b)
      : status(s), headers(std::move(h)), body(std::move(b)) {}
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;                  // sent with Content-Length unless chunks are given
  std::vector<std::string> chunks;   // sent with Transfer-Encoding: chunked
  std::chrono::milliseconds chunk_gap{5};
  bool hold_open = false;            // after the chunks, keep the stream open until stop
};

struct FakeRequest {
  std::string method, target, body;
  std::vector<std::string> header_lines;
};

class FakeHttpServer {
 public:
  using Handler = std::function<FakeResponse(const FakeRequest&)>;
  explicit FakeHttpServer(Handler h) : handler_(std::move(h)), listener_(0, 16) {
    thread_ = std::thread([this] { loop(); });
  }
  ~FakeHttpServer() {
    stop_ = true;
    listener_.shutdown();
    thread_.join();
    for (auto& t : conns_) t.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(listener_.port()); }
  std::vector<FakeRequest> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  void loop() {
    while (!stop_) {
      int c = listener_.accept();
      if (c < 0) return;
      conns_.emplace_back([this, c] { serve(c); });
    }
  }
  void serve(int c) {
    std::string in;
    char buf[4096];
    size_t header_end;
    while ((header_end = in.find("\r\n\r\n")) == std::string::npos) {
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return (void)::close(c);
      in.append(buf, static_cast<size_t>(n));
    }
    FakeRequest req;
    std::string head = in.substr(0, header_end);
    size_t line_end = head.find("\r\n");
    std::string first = head.substr(0, line_end);
    req.method = first.substr(0, first.find(' '));
    req.target = first.substr(first.find(' ') + 1, first.rfind(' ') - first.find(' ') - 1);
    size_t content_length = 0;
    for (size_t pos = line_end + 2; pos < head.size();) {
      size_t e = head.find("\r\n", pos);
      if (e == std::string::npos) e = head.size();
      std::string h = head.substr(pos, e - pos);
      req.header_lines.push_back(h);
      if (h.rfind("Content-Length:", 0) == 0 || h.rfind("content-length:", 0) == 0)
        content_length = std::stoul(h.substr(15));
      pos = e + 2;
    }
    req.body = in.substr(header_end + 4);
    while (req.body.size() < content_length) {
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) break;
      req.body.append(buf, static_cast<size_t>(n));
    }
    {
      std::lock_guard lock(mu_);
      requests_.push_back(req);
    }
    FakeResponse r = handler_(req);
    std::string out = "HTTP/1.1 " + std::to_string(r.status) + " X\r\nContent-Type: application/json\r\nConnection: close\r\n";
    for (auto& [k, v] : r.headers) out += k + ": " + v + "\r\n";
    if (r.chunks.empty()) {
      out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n\r\n" + r.body;
      weft::testing::send_all(c, out);
    } else {
      out += "Transfer-Encoding: chunked\r\n\r\n";
      weft::testing::send_all(c, out);
      for (const auto& ch : r.chunks) {
        char len[32];
        std::snprintf(len, sizeof len, "%zx\r\n", ch.size());
        if (!weft::testing::send_all(c, std::string(len) + ch + "\r\n")) break;
        std::this_thread::sleep_for(r.chunk_gap);
      }
      while (r.hold_open && !stop_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      weft::testing::send_all(c, "0\r\n\r\n");
    }
    ::shutdown(c, SHUT_WR);
    ::close(c);
  }

  Handler handler_;
  weft::testing::Listener listener_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> conns_;
  std::mutex mu_;
  std::vector<FakeRequest> requests_;
};

}  // namespace weft::kube::testing
