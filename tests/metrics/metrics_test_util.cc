#include "metrics/metrics_test_util.h"

#include <fcntl.h>
#include <signal.h>
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
