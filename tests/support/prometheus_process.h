// Test support: a real prometheus process on loopback, for tests that scrape
// with it or read its own /metrics. defines: find_prometheus, PrometheusProcess.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>

namespace weft::testing {

// /usr/bin/prometheus (Debian's package) or /usr/local/bin/prometheus; empty
// when neither is installed (the caller skips).
std::string find_prometheus();

// Starts `binary` with `config_yaml` written to dir/prometheus.yml, its TSDB
// in dir/data, its log in dir/prometheus.log, listening on 127.0.0.1:port;
// SIGTERM to its process group on destruction.
class PrometheusProcess {
 public:
  PrometheusProcess(const std::string& binary, const std::filesystem::path& dir, const std::string& config_yaml,
                    int port);
  ~PrometheusProcess();
  PrometheusProcess(const PrometheusProcess&) = delete;
  PrometheusProcess& operator=(const PrometheusProcess&) = delete;
  bool started() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

}  // namespace weft::testing
