#include "scrape/http_scraper.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>

namespace weft::scrape {
namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Closes the socket on every return path.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// A non-blocking connect to the first address that answers before the deadline.
int connect_to(const Endpoint& ep, Clock::time_point deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(ep.port);
  if (int rc = ::getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    error = std::string("cannot resolve host: ") + ::gai_strerror(rc);
    return -1;
  }
  int connected = -1;
  error = "no address";
  for (addrinfo* a = found; a && connected < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, remaining_ms(deadline));
      if (rc == 0) {
        error = "connect timed out";
        ::close(fd);
        continue;
      }
      int so_error = 0;
      socklen_t len = sizeof so_error;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
      rc = so_error == 0 ? 0 : -1;
      errno = so_error;
    }
    if (rc == 0) {
      connected = fd;
    } else {
      error = std::string("connect: ") + std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  return connected;
}

bool send_all(int fd, const std::string& data, Clock::time_point deadline, std::string& error) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, remaining_ms(deadline)) <= 0) {
        error = "send timed out";
        return false;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    error = std::string("send: ") + std::strerror(errno);
    return false;
  }
  return true;
}

// Reads until the peer closes; false (with error) on timeout or a read error.
bool read_to_close(int fd, std::string& out, Clock::time_point deadline, std::string& error) {
  char buf[16384];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc == 0) {
      error = "read timed out";
      return false;
    }
    if (rc < 0) {
      if (errno == EINTR) continue;
      error = std::string("poll: ") + std::strerror(errno);
      return false;
    }
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      error = std::string("read: ") + std::strerror(errno);
      return false;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A chunked body: hex size line (extensions ignored), data, CRLF; ends at 0.
std::optional<std::string> dechunk(const std::string& raw) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    size_t eol = raw.find("\r\n", pos);
    if (eol == std::string::npos) return std::nullopt;
    std::string size_text = raw.substr(pos, eol - pos);
    if (size_t semi = size_text.find(';'); semi != std::string::npos) size_text.resize(semi);
    char* end = nullptr;
    unsigned long size = std::strtoul(size_text.c_str(), &end, 16);
    if (size_text.empty() || end == size_text.c_str()) return std::nullopt;
    pos = eol + 2;
    if (size == 0) return out;
    if (pos + size > raw.size()) return std::nullopt;
    out.append(raw, pos, size);
    pos += size + 2;
  }
}

}  // namespace

std::string Endpoint::url() const {
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + path;
}

HttpResponse http_get(const Endpoint& ep, std::chrono::milliseconds timeout) {
  HttpResponse r;
  const auto deadline = Clock::now() + timeout;
  std::string error;
  Fd sock{connect_to(ep, deadline, error)};
  if (sock.fd < 0) {
    r.error = ep.url() + ": " + error;
    return r;
  }
  const bool v6 = ep.host.find(':') != std::string::npos;
  const std::string request = "GET " + ep.path + " HTTP/1.1\r\nHost: " + (v6 ? "[" + ep.host + "]" : ep.host) +
                              ":" + std::to_string(ep.port) +
                              "\r\nAccept: text/plain;version=0.0.4;q=1,*/*;q=0.1\r\n"
                              "Accept-Encoding: identity\r\nUser-Agent: weft-operator\r\nConnection: close\r\n\r\n";
  std::string raw;
  if (!send_all(sock.fd, request, deadline, error) || !read_to_close(sock.fd, raw, deadline, error)) {
    r.error = ep.url() + ": " + error;
    return r;
  }
  size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos || raw.compare(0, 5, "HTTP/") != 0) {
    r.error = ep.url() + ": no HTTP response head";
    return r;
  }
  size_t sp = raw.find(' ');
  r.status = sp < head_end ? std::atoi(raw.c_str() + sp + 1) : 0;
  bool chunked = false;
  std::optional<size_t> length;
  size_t pos = raw.find("\r\n") + 2;
  while (pos < head_end) {
    size_t eol = raw.find("\r\n", pos);
    std::string line = raw.substr(pos, eol - pos);
    pos = eol + 2;
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = lower(line.substr(0, colon));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front()))) value.erase(0, 1);
    if (key == "transfer-encoding" && lower(value).find("chunked") != std::string::npos) chunked = true;
    if (key == "content-length") length = std::strtoull(value.c_str(), nullptr, 10);
  }
  std::string body = raw.substr(head_end + 4);
  if (chunked) {
    auto plain = dechunk(body);
    if (!plain) {
      r.error = ep.url() + ": malformed chunked body";
      return r;
    }
    body = std::move(*plain);
  } else if (length) {
    if (body.size() < *length) {
      r.error = ep.url() + ": body shorter than its Content-Length (" + std::to_string(body.size()) + " of " +
                std::to_string(*length) + " bytes)";
      return r;
    }
    body.resize(*length);
  }
  r.body = std::move(body);
  return r;
}

ScrapeResult scrape(const Endpoint& ep, std::chrono::milliseconds timeout) {
  ScrapeResult out;
  HttpResponse resp = http_get(ep, timeout);
  if (!resp.error.empty()) {
    out.error = resp.error;
    return out;
  }
  if (resp.status != 200) {
    out.error = ep.url() + ": HTTP " + std::to_string(resp.status);
    return out;
  }
  ParseResult parsed = parse_text(resp.body);
  out.metrics = std::move(parsed.exposition);
  if (parsed.error)
    out.error = ep.url() + ": line " + std::to_string(parsed.error->line) + ": " + parsed.error->message;
  return out;
}

}  // namespace weft::scrape
