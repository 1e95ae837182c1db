#include "metrics/metrics_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace weft::metrics_test {

namespace {
using Clock = std::chrono::steady_clock;

// Reads label pairs from `s` starting after '{'; returns the index after '}'.
size_t parse_labels(const std::string& s, size_t i, std::map<std::string, std::string>& out) {
  while (i < s.size() && s[i] != '}') {
    size_t eq = s.find('=', i);
    if (eq == std::string::npos || eq + 1 >= s.size() || s[eq + 1] != '"')
      throw std::runtime_error("bad label set in exposition line: " + s);
    std::string name = s.substr(i, eq - i);
    std::string value;
    size_t j = eq + 2;
    for (; j < s.size() && s[j] != '"'; ++j) {
      if (s[j] == '\\' && j + 1 < s.size()) ++j;
      value += s[j];
    }
    out[name] = value;
    i = j + 1;
    if (i < s.size() && s[i] == ',') ++i;
  }
  return i + 1;
}
}  // namespace

std::string sample_key(const std::string& name, std::map<std::string, std::string> labels) {
  if (labels.empty()) return name;
  std::string k = name + "{";
  bool first = true;
  for (const auto& [n, v] : labels) {
    k += (first ? "" : ",") + n + "=\"" + v + "\"";
    first = false;
  }
  return k + "}";
}

std::map<std::string, double> parse_exposition(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    std::string name = line.substr(0, i);
    std::map<std::string, std::string> labels;
    if (i < line.size() && line[i] == '{') i = parse_labels(line, i + 1, labels);
    std::istringstream rest(line.substr(i));
    std::string value;
    rest >> value;
    double v = value == "Nan" || value == "NaN" ? std::nan("") : std::stod(value);
    out[sample_key(name, labels)] = v;
  }
  return out;
}

std::set<std::string> sample_names(const std::string& text) {
  std::set<std::string> names;
  for (const auto& [key, v] : parse_exposition(text)) names.insert(key.substr(0, key.find('{')));
  return names;
}

std::string dashboard_path() {
  return std::string(WEFT_SOURCE_DIR) + "/charts/weft/dashboards/weft-sync-overlap.json";
}

nlohmann::json load_dashboard() {
  std::ifstream f(dashboard_path());
  if (!f) throw std::runtime_error("cannot open " + dashboard_path());
  return nlohmann::json::parse(f);
}

std::vector<nlohmann::json> all_panels(const nlohmann::json& dash) {
  std::vector<nlohmann::json> out;
  for (const auto& p : dash.value("panels", nlohmann::json::array())) {
    out.push_back(p);
    for (const auto& q : p.value("panels", nlohmann::json::array())) out.push_back(q);
  }
  return out;
}

std::vector<DashboardQuery> dashboard_queries(const nlohmann::json& dash) {
  std::vector<DashboardQuery> out;
  for (const auto& p : all_panels(dash))
    for (const auto& t : p.value("targets", nlohmann::json::array()))
      out.push_back({p.value("title", "?"), t.value("expr", "")});
  return out;
}

std::set<std::string> referenced_metrics(const std::string& expr) {
  static const std::regex name(R"(\bweft_[A-Za-z0-9_:]+)");
  std::set<std::string> out;
  for (std::sregex_iterator it(expr.begin(), expr.end(), name), end; it != end; ++it)
    out.insert(it->str());
  return out;
}

std::string substitute(std::string expr, const std::map<std::string, std::string>& vars) {
  std::vector<std::pair<std::string, std::string>> v(vars.begin(), vars.end());
  // Longest names first, so $job never eats the start of $jobs.
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first.size() > b.first.size(); });
  for (const auto& [name, value] : v) {
    for (const std::string& pat : {"${" + name + "}", "$" + name}) {
      size_t pos;
      while ((pos = expr.find(pat)) != std::string::npos) expr.replace(pos, pat.size(), value);
    }
  }
  return expr;
}

HttpResponse http_get(int port, const std::string& path, double timeout_s) {
  HttpResponse r;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return r;
  }
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return r;
  }
  std::string raw;
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  char buf[65536];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t k = read(fd, buf, sizeof buf);
    if (k <= 0) break;
    raw.append(buf, static_cast<size_t>(k));
  }
  close(fd);
  size_t sp = raw.find(' '), hdr_end = raw.find("\r\n\r\n");
  if (sp == std::string::npos || hdr_end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + sp + 1);
  r.body = raw.substr(hdr_end + 4);
  return r;
}

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

namespace {
bool bindable(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_ANY);  // the worker binds 0.0.0.0
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}
}  // namespace

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    throw std::runtime_error("bind port 0 failed");
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

int free_port_pair() {
  for (int attempt = 0; attempt < 100; ++attempt) {
    int p = free_port();
    if (p < 65535 && bindable(p) && bindable(p + 1)) return p;
  }
  throw std::runtime_error("no two consecutive free ports found");
}

bool executable_exists(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

Child spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            const std::string& log_path) {
  Child c;
  c.log_path = log_path;
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) throw std::runtime_error("cannot create " + log_path);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(log, 1);
    dup2(log, 2);
    for (const auto& [k, v] : env) {
      if (v.empty())
        unsetenv(k.c_str());
      else
        setenv(k.c_str(), v.c_str(), 1);
    }
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    std::fprintf(stderr, "cannot exec %s\n", a[0]);
    _exit(127);
  }
  close(log);
  if (pid < 0) throw std::runtime_error("fork failed");
  setpgid(pid, pid);
  c.pid = pid;
  return c;
}

bool running(const Child& c) {
  if (c.pid <= 0) return false;
  int status;
  return waitpid(c.pid, &status, WNOHANG) == 0;  // a reaped child stays "not running"
}

int stop(Child& c, double grace_s) {
  if (c.pid <= 0) return -1;
  kill(-c.pid, SIGTERM);
  const auto kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int>(grace_s * 1000));
  int status = 0;
  while (true) {
    pid_t w = waitpid(c.pid, &status, WNOHANG);
    if (w == c.pid) break;
    if (w < 0) return -1;  // already reaped by running()
    if (Clock::now() >= kill_at) {
      kill(-c.pid, SIGKILL);
      waitpid(c.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  c.pid = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int run_shell(const std::string& cmd, std::string* output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t k;
  output->clear();
  while ((k = fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, k);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace weft::metrics_test
