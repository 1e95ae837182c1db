#include "support/prometheus_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "support/run_process.h"

namespace weft::testing {

std::string find_prometheus() {
  for (const char* c : {"/usr/bin/prometheus", "/usr/local/bin/prometheus"})
    if (::access(c, X_OK) == 0) return c;
  return "";
}

PrometheusProcess::PrometheusProcess(const std::string& binary, const std::filesystem::path& dir,
                                     const std::string& config_yaml, int port) {
  write_file(dir / "prometheus.yml", config_yaml);
  const std::string config = "--config.file=" + (dir / "prometheus.yml").string();
  const std::string storage = "--storage.tsdb.path=" + (dir / "data").string();
  const std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(port);
  const std::string log = (dir / "prometheus.log").string();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::setpgid(0, 0);
    if (std::freopen(log.c_str(), "w", stdout)) ::dup2(STDOUT_FILENO, STDERR_FILENO);
    ::execl(binary.c_str(), binary.c_str(), config.c_str(), storage.c_str(), listen.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
}

PrometheusProcess::~PrometheusProcess() {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
}

}  // namespace weft::testing
