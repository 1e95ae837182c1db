#include "scrape/prom_text.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace weft::scrape {
namespace {

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_blank(char c) { return c == ' ' || c == '\t'; }

// A cursor over one line; every reader leaves `pos` after what it consumed.
struct LineReader {
  std::string_view s;
  size_t pos = 0;
  std::string error;

  bool done() const { return pos >= s.size(); }
  void skip_blanks() {
    while (!done() && is_blank(s[pos])) ++pos;
  }
  bool name(std::string& out, bool allow_colon = true) {
    size_t start = pos;
    if (done() || !is_name_start(s[pos]) || (!allow_colon && s[pos] == ':')) {
      error = "expected a metric or label name at column " + std::to_string(pos + 1);
      return false;
    }
    while (!done() && is_name_char(s[pos]) && (allow_colon || s[pos] != ':')) ++pos;
    out.assign(s.substr(start, pos - start));
    return true;
  }
  // A double-quoted label value with \\, \" and \n escapes.
  bool quoted(std::string& out) {
    if (done() || s[pos] != '"') {
      error = "expected '\"' at column " + std::to_string(pos + 1);
      return false;
    }
    ++pos;
    out.clear();
    while (!done()) {
      char c = s[pos++];
      if (c == '"') return true;
      if (c == '\\') {
        if (done()) break;
        char e = s[pos++];
        out += e == 'n' ? '\n' : e;  // \\ and \" stand for themselves
      } else {
        out += c;
      }
    }
    error = "unterminated label value";
    return false;
  }
  std::string_view token() {
    size_t start = pos;
    while (!done() && !is_blank(s[pos])) ++pos;
    return s.substr(start, pos - start);
  }
};

// Go's and prometheus-cpp's spellings of the special values, and decimals.
std::optional<double> parse_value(std::string_view t) {
  if (t == "NaN" || t == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (t == "+Inf" || t == "Inf" || t == "inf" || t == "+inf") return std::numeric_limits<double>::infinity();
  if (t == "-Inf" || t == "-inf") return -std::numeric_limits<double>::infinity();
  if (t.empty()) return std::nullopt;
  std::string copy(t);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || (errno == ERANGE && std::isinf(v))) return std::nullopt;
  return v;
}

std::optional<int64_t> parse_int(std::string_view t) {
  if (t.empty()) return std::nullopt;
  std::string copy(t);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(copy.c_str(), &end, 10);
  if (end != copy.c_str() + copy.size() || errno == ERANGE) return std::nullopt;
  return v;
}

std::string unescape_help(std::string_view t) {
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '\\' && i + 1 < t.size() && (t[i + 1] == '\\' || t[i + 1] == 'n')) {
      out += t[i + 1] == 'n' ? '\n' : '\\';
      ++i;
    } else {
      out += t[i];
    }
  }
  return out;
}

// "# HELP name text" or "# TYPE name type"; any other comment is ignored.
std::optional<std::string> parse_comment(std::string_view line, Exposition& out) {
  LineReader r{line, 1, {}};
  r.skip_blanks();
  std::string_view keyword = r.token();
  if (keyword != "HELP" && keyword != "TYPE") return std::nullopt;
  r.skip_blanks();
  std::string name;
  if (!r.name(name)) return r.error;
  if (keyword == "HELP") {
    if (!r.done()) ++r.pos;  // the one separating blank
    out.families[name].help = unescape_help(line.substr(r.pos));
    return std::nullopt;
  }
  r.skip_blanks();
  std::string_view type = r.token();
  static const std::pair<std::string_view, MetricType> kTypes[] = {
      {"counter", MetricType::Counter},     {"gauge", MetricType::Gauge},
      {"histogram", MetricType::Histogram}, {"summary", MetricType::Summary},
      {"untyped", MetricType::Untyped}};
  for (const auto& [word, t] : kTypes) {
    if (type == word) {
      out.families[name].type = t;
      return std::nullopt;
    }
  }
  return "unknown metric type '" + std::string(type) + "'";
}

std::optional<std::string> parse_sample(std::string_view line, Sample& s) {
  LineReader r{line, 0, {}};
  if (!r.name(s.name)) return r.error;
  r.skip_blanks();
  if (!r.done() && r.s[r.pos] == '{') {
    ++r.pos;
    for (;;) {
      r.skip_blanks();
      if (r.done()) return "unterminated label set";
      if (r.s[r.pos] == '}') {
        ++r.pos;
        break;
      }
      std::string key, value;
      if (!r.name(key, false)) return r.error;
      r.skip_blanks();
      if (r.done() || r.s[r.pos] != '=') return "expected '=' after label " + key;
      ++r.pos;
      r.skip_blanks();
      if (!r.quoted(value)) return r.error;
      s.labels.emplace_back(std::move(key), std::move(value));
      r.skip_blanks();
      if (!r.done() && r.s[r.pos] == ',') ++r.pos;  // a trailing comma is allowed
      else if (r.done() || r.s[r.pos] != '}') return "expected ',' or '}' after label " + s.labels.back().first;
    }
  }
  r.skip_blanks();
  std::string_view value_text = r.token();
  auto v = parse_value(value_text);
  if (!v) return "bad sample value '" + std::string(value_text) + "'";
  s.value = *v;
  r.skip_blanks();
  if (!r.done()) {
    std::string_view ts_text = r.token();
    auto ts = parse_int(ts_text);
    if (!ts) return "bad timestamp '" + std::string(ts_text) + "'";
    s.timestamp_ms = *ts;
    r.skip_blanks();
    if (!r.done()) return "unexpected text after the timestamp";
  }
  return std::nullopt;
}

}  // namespace

const std::string* Sample::label(std::string_view key) const {
  for (const auto& [k, v] : labels)
    if (k == key) return &v;
  return nullptr;
}

bool Sample::matches(const Labels& match) const {
  for (const auto& [k, v] : match) {
    const std::string* have = label(k);
    if (!have || *have != v) return false;
  }
  return true;
}

const char* metric_type_name(MetricType t) {
  switch (t) {
    case MetricType::Counter: return "counter";
    case MetricType::Gauge: return "gauge";
    case MetricType::Histogram: return "histogram";
    case MetricType::Summary: return "summary";
    case MetricType::Untyped: break;
  }
  return "untyped";
}

std::vector<const Sample*> Exposition::find(std::string_view name, const Labels& match) const {
  std::vector<const Sample*> out;
  for (const Sample& s : samples)
    if (s.name == name && s.matches(match)) out.push_back(&s);
  return out;
}

std::optional<double> Exposition::value(std::string_view name, const Labels& match) const {
  auto found = find(name, match);
  if (found.size() != 1) return std::nullopt;
  return found[0]->value;
}

std::optional<double> Exposition::sum(std::string_view name, const Labels& match) const {
  auto found = find(name, match);
  if (found.empty()) return std::nullopt;
  double total = 0;
  for (const Sample* s : found) total += s->value;
  return total;
}

ParseResult parse_text(std::string_view text) {
  ParseResult result;
  int line_no = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t first = 0;
    while (first < line.size() && is_blank(line[first])) ++first;
    line.remove_prefix(first);
    if (line.empty()) continue;
    std::optional<std::string> err;
    if (line[0] == '#') {
      err = parse_comment(line, result.exposition);
    } else {
      Sample s;
      err = parse_sample(line, s);
      if (!err) result.exposition.samples.push_back(std::move(s));
    }
    if (err) {
      result.error = ParseError{line_no, *err};
      break;
    }
  }
  return result;
}

}  // namespace weft::scrape
