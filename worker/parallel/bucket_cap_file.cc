#include "parallel/bucket_cap_file.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "small_file.h"
#include "weft_contract.h"

namespace weft {

namespace {

// The file's text as a log may show it: printable ASCII as is, every other
// byte (escape sequences, NULs, newlines) as \xNN, at most 64 bytes of it,
// so a file's bytes cannot rewrite the terminal or forge log lines.
std::string printable(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (text.size() > 64) out += "...";
  return out;
}

}  // namespace

std::optional<double> BucketCapFile::poll() {
  // Polled before every step: a FIFO there would block the rank, and
  // /dev/zero or a huge file would grow its memory and its log without
  // bound. Such a file is rejected like a bad value (once per kind of
  // refusal), and the cap in force stays.
  const SmallFile f = read_small_file(path_, kMaxLineFileBytes);
  if (f.status == SmallFile::Status::Missing) return std::nullopt;
  if (!f.ok()) {
    if (!have_last_ || last_text_ != f.problem) {
      ++rejected_;
      spdlog::warn("{}; keeping the current bucket cap", f.problem);
    }
    have_last_ = true;
    last_text_ = f.problem;
    return std::nullopt;
  }
  const std::string& text = f.text;
  if (have_last_ && text == last_text_) return std::nullopt;
  have_last_ = true;
  last_text_ = text;
  // Empty: no size asked for (an operator-run job before the tuner writes
  // one: the spec's cap came in config.yaml); the ranks keep their own.
  if (std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isspace(c); })) return std::nullopt;
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(begin, &end);
  while (end && *end && std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (end == begin || (end && *end) || errno != 0 || !std::isfinite(v)) {
    ++rejected_;
    spdlog::warn("{}: rejected bucket cap '{}': not a number of MiB; keeping the current cap", path_,
                 printable(text));
    return std::nullopt;
  }
  if (!contract::valid_bucket_cap_mb(v)) {
    ++rejected_;
    spdlog::warn("{}: rejected bucket cap {} MiB: outside (0, {}] MiB; keeping the current cap", path_, v,
                 contract::kMaxBucketCapMb);
    return std::nullopt;
  }
  return v;
}

}  // namespace weft
