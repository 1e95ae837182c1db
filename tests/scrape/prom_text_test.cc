// parse_text on tables of lines and on whole expositions captured from a
// 2-rank weft-worker run (rank 0) and from prometheus 2.42's own /metrics.
#include "scrape/prom_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

namespace weft::scrape {
namespace {

std::string testdata(const std::string& name) {
  std::ifstream in(std::string(WEFT_SOURCE_DIR) + "/tests/scrape/testdata/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(PromText, SamplesLabelsAndMetadata) {
  auto r = parse_text(
      "# HELP weft_step Optimizer steps completed\n"
      "# TYPE weft_step gauge\n"
      "weft_step{rank=\"0\"} 857\n"
      "weft_step{rank=\"1\",} 856 1700000000000\n"
      "\n"
      "# a free comment\n"
      "  up 1\r\n"
      "weft_x{a=\"q\\\"uote\",b=\"back\\\\slash\",c=\"new\\nline\"} -2.5e-3\n");
  ASSERT_TRUE(r.ok()) << r.error->message;
  const auto& e = r.exposition;
  ASSERT_EQ(e.samples.size(), 4u);
  EXPECT_EQ(e.families.at("weft_step").type, MetricType::Gauge);
  EXPECT_EQ(e.families.at("weft_step").help, "Optimizer steps completed");
  EXPECT_EQ(e.value("weft_step", {{"rank", "0"}}), 857);
  EXPECT_EQ(e.samples[1].timestamp_ms, 1700000000000);
  EXPECT_FALSE(e.value("weft_step").has_value()) << "two series match: no single value";
  EXPECT_EQ(e.sum("weft_step"), 857 + 856);
  EXPECT_EQ(e.value("up"), 1);
  EXPECT_EQ(*e.samples[3].label("a"), "q\"uote");
  EXPECT_EQ(*e.samples[3].label("b"), "back\\slash");
  EXPECT_EQ(*e.samples[3].label("c"), "new\nline");
  EXPECT_DOUBLE_EQ(e.samples[3].value, -2.5e-3);
  EXPECT_EQ(e.samples[3].label("d"), nullptr);
  EXPECT_FALSE(e.sum("absent").has_value());
}

TEST(PromText, SpecialValues) {
  auto r = parse_text("a NaN\nb +Inf\nc -Inf\nd{le=\"+Inf\"} 3\ne 1e308\n");
  ASSERT_TRUE(r.ok());
  const auto& s = r.exposition.samples;
  EXPECT_TRUE(std::isnan(s[0].value));
  EXPECT_EQ(s[1].value, INFINITY);
  EXPECT_EQ(s[2].value, -INFINITY);
  EXPECT_EQ(*s[3].label("le"), "+Inf");
  EXPECT_EQ(s[4].value, 1e308);
}

struct BadCase {
  const char* text;
  int line;
  const char* message_part;
};

TEST(PromText, MalformedLinesAreReportedWithTheirNumber) {
  const BadCase cases[] = {
      {"ok 1\n9lives 1\n", 2, "expected a metric"},
      {"x{a=\"1\" 2\n", 1, "expected ',' or '}'"},
      {"x{a=1} 2\n", 1, "expected '\"'"},
      {"x{a=\"1} 2\n", 1, "unterminated"},
      {"x{a} 2\n", 1, "expected '='"},
      {"x 1.2.3\n", 1, "bad sample value"},
      {"x\n", 1, "bad sample value"},
      {"x 1 12.5\n", 1, "bad timestamp"},
      {"x 1 12 extra\n", 1, "unexpected text"},
      {"# TYPE x widget\n", 1, "unknown metric type"},
      {"a 1\nb 2\n\nc{\n", 4, "unterminated label set"},
  };
  for (const BadCase& c : cases) {
    auto r = parse_text(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.error->line, c.line) << c.text;
    EXPECT_NE(r.error->message.find(c.message_part), std::string::npos) << c.text << ": " << r.error->message;
  }
  // What came before the bad line is kept.
  EXPECT_EQ(parse_text("a 1\nb 2\n\nc{\n").exposition.samples.size(), 2u);
}

TEST(PromText, WeftWorkerExposition) {
  const std::string text = testdata("weft_worker_rank0.prom");
  ASSERT_FALSE(text.empty());
  auto r = parse_text(text);
  ASSERT_TRUE(r.ok()) << "line " << r.error->line << ": " << r.error->message;
  const auto& e = r.exposition;
  const Labels rank0 = {{"rank", "0"}};
  EXPECT_EQ(e.value("weft_step", rank0), 857);
  EXPECT_EQ(e.value("weft_bucket_cap_bytes", rank0), 52428);
  EXPECT_EQ(e.value("weft_step_seconds_count", rank0), 857);
  EXPECT_EQ(e.families.at("weft_step_seconds").type, MetricType::Histogram);
  EXPECT_EQ(e.families.at("weft_phase_seconds_total").type, MetricType::Counter);
  EXPECT_NEAR(*e.value("weft_phase_seconds_total", {{"rank", "0"}, {"phase", "exposed_comm"}}), 6.842378681, 1e-9);
  EXPECT_EQ(e.value("weft_worker_info", {{"strategy", "dp"}, {"world_size", "2"}}), 1);
  // The +Inf bucket of a histogram counts every observation.
  EXPECT_EQ(e.value("weft_step_seconds_bucket", {{"rank", "0"}, {"le", "+Inf"}}), 857);
}

TEST(PromText, PrometheusOwnExposition) {
  const std::string text = testdata("prometheus_2.42.prom");
  ASSERT_FALSE(text.empty());
  auto r = parse_text(text);
  ASSERT_TRUE(r.ok()) << "line " << r.error->line << ": " << r.error->message;
  const auto& e = r.exposition;
  EXPECT_EQ(e.families.at("go_gc_duration_seconds").type, MetricType::Summary);
  EXPECT_NEAR(*e.value("go_gc_duration_seconds", {{"quantile", "0.5"}}), 0.000310128, 1e-12);
  EXPECT_EQ(e.value("prometheus_build_info", {{"version", "2.42.0+ds"}}), 1);
  EXPECT_GT(e.samples.size(), 200u);
  int histograms = 0;
  for (const auto& [name, f] : e.families) histograms += f.type == MetricType::Histogram;
  EXPECT_GT(histograms, 3);
}

}  // namespace
}  // namespace weft::scrape
