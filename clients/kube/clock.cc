#include "kube/clock.h"

#include <cstdio>
#include <ctime>

namespace weft::kube {

std::string format_time(TimePoint t) {
  std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string format_micro_time(TimePoint t) {
  auto secs = std::chrono::time_point_cast<std::chrono::seconds>(t);
  if (secs > t) secs -= std::chrono::seconds(1);
  long micros = std::chrono::duration_cast<std::chrono::microseconds>(t - secs).count();
  std::string s = format_time(secs);
  char frac[32];
  std::snprintf(frac, sizeof frac, ".%06ldZ", micros);
  return s.substr(0, s.size() - 1) + frac;
}

std::optional<TimePoint> parse_time(const std::string& s) {
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &consumed) != 6)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  TimePoint t = std::chrono::system_clock::from_time_t(timegm(&tm));
  const char* rest = s.c_str() + consumed;
  if (*rest == '.') {
    long frac = 0;
    int digits = 0;
    for (++rest; *rest >= '0' && *rest <= '9'; ++rest, ++digits)
      if (digits < 6) frac = frac * 10 + (*rest - '0');
    for (; digits < 6; ++digits) frac *= 10;
    t += std::chrono::microseconds(frac);
  }
  if (*rest != 'Z') return std::nullopt;  // the API server always writes UTC
  return t;
}

}  // namespace weft::kube
