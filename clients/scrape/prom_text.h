// Parser of the Prometheus text exposition format (version 0.0.4): what
// prometheus-cpp, client_golang (prometheus' own /metrics) and weft-worker's
// metrics server answer to GET /metrics. Pure: text in, samples out; no I/O.
// defines: Labels, Sample, MetricType, Family, Exposition, parse_text.
//
// Invariants of a parsed Exposition:
//  - samples keep the order of the text; labels keep the order of each line;
//  - a sample's name is the name on its line (histograms and summaries keep
//    their _bucket/_sum/_count suffixes), and `families` holds the # HELP and
//    # TYPE lines by the family name they declare;
//  - values are doubles, NaN and +/-Inf included; label values are unescaped.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft::scrape {

using Labels = std::vector<std::pair<std::string, std::string>>;

struct Sample {
  std::string name;
  Labels labels;
  double value = 0;
  std::optional<int64_t> timestamp_ms;

  // The value of label `key`, or nullptr when the sample has no such label.
  const std::string* label(std::string_view key) const;
  // Whether every (key, value) of `match` is among the labels.
  bool matches(const Labels& match) const;
};

enum class MetricType { Untyped, Counter, Gauge, Histogram, Summary };
const char* metric_type_name(MetricType t);  // "untyped", "counter", ...

struct Family {
  std::string help;  // unescaped; empty when no # HELP line
  MetricType type = MetricType::Untyped;
};

struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, Family> families;  // by family name, from # HELP / # TYPE

  // Samples named `name` whose labels include `match`, in text order.
  std::vector<const Sample*> find(std::string_view name, const Labels& match = {}) const;
  // The value of the only sample named `name` that matches; nullopt when none
  // or several match (a caller that expects one series should not guess).
  std::optional<double> value(std::string_view name, const Labels& match = {}) const;
  // Sum over all matching samples (e.g. a counter over its label values);
  // nullopt when none matches.
  std::optional<double> sum(std::string_view name, const Labels& match = {}) const;
};

struct ParseError {
  int line = 0;  // 1-based
  std::string message;
};

struct ParseResult {
  Exposition exposition;               // what was parsed up to an error
  std::optional<ParseError> error;     // the first malformed line, if any
  bool ok() const { return !error; }
};

// Parses a whole exposition. The first malformed line stops parsing and is
// reported with its number; the samples before it are kept.
ParseResult parse_text(std::string_view text);

}  // namespace weft::scrape
