#include "kube/quantity.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

namespace weft::kube {
namespace {

bool digit(char c) { return c >= '0' && c <= '9'; }

Quantity bad(const std::string& text, const std::string& why) {
  Quantity q;
  q.error = "'" + text + "' is not a quantity: " + why;
  return q;
}

// The multiplier of a suffix; 0 when it is not one.
long double suffix_multiplier(const std::string& s) {
  static const std::pair<const char*, long double> kSuffixes[] = {
      {"", 1.0L},      {"Ki", 0x1p10L}, {"Mi", 0x1p20L}, {"Gi", 0x1p30L},
      {"Ti", 0x1p40L}, {"Pi", 0x1p50L}, {"Ei", 0x1p60L}, {"n", 1e-9L},
      {"u", 1e-6L},    {"m", 1e-3L},    {"k", 1e3L},     {"M", 1e6L},
      {"G", 1e9L},     {"T", 1e12L},    {"P", 1e15L},    {"E", 1e18L},
  };
  for (const auto& [name, mult] : kSuffixes)
    if (s == name) return mult;
  return 0;
}

}  // namespace

int64_t Quantity::ceil_int64() const {
  const long double up = std::ceil(value);
  if (up >= static_cast<long double>(std::numeric_limits<int64_t>::max()))
    return std::numeric_limits<int64_t>::max();
  if (up <= static_cast<long double>(std::numeric_limits<int64_t>::min()))
    return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(up);
}

Quantity parse_quantity(const std::string& text) {
  const std::string& s = text;
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  const size_t num_begin = i;
  while (i < s.size() && digit(s[i])) ++i;
  size_t digits = i - num_begin;
  if (i < s.size() && s[i] == '.') {
    ++i;
    const size_t frac_begin = i;
    while (i < s.size() && digit(s[i])) ++i;
    digits += i - frac_begin;
  }
  if (digits == 0) return bad(text, "expected a number such as 64Mi, 1G or 1e9");
  const std::string number = s.substr(num_begin, i - num_begin);
  const std::string suffix = s.substr(i);

  long double mult = 0;
  // "E" alone is exa and "Ei" exbi; "e" or "E" before a sign or a digit is an exponent.
  if (suffix.size() > 1 && (suffix[0] == 'e' || suffix[0] == 'E') &&
      (digit(suffix[1]) || suffix[1] == '+' || suffix[1] == '-')) {
    // An exponent: e or E, an optional sign, at least one digit.
    size_t j = 1;
    if (suffix[j] == '+' || suffix[j] == '-') ++j;
    const size_t exp_begin = j;
    while (j < suffix.size() && digit(suffix[j])) ++j;
    if (j == exp_begin || j != suffix.size())
      return bad(text, "the exponent must be e<integer>, e.g. 1e9");
    const long exp = std::strtol(suffix.c_str() + 1, nullptr, 10);
    if (exp > 4000 || exp < -4000) return bad(text, "the exponent is out of range");
    mult = std::pow(10.0L, static_cast<long double>(exp));
  } else {
    mult = suffix_multiplier(suffix);
    if (mult == 0)
      return bad(
          text,
          "unknown suffix '" + suffix +
              "' (binary: Ki Mi Gi Ti Pi Ei; decimal: k M G T P E; or an exponent such as 1e9)");
  }
  Quantity q;
  q.ok = true;
  q.value = std::strtold(number.c_str(), nullptr) * mult * (negative ? -1 : 1);
  return q;
}

Quantity parse_quantity(const nlohmann::json& value) {
  if (value.is_string()) return parse_quantity(value.get<std::string>());
  if (value.is_number()) {
    Quantity q;
    q.ok = std::isfinite(value.get<double>());
    q.value = value.is_number_unsigned()  ? static_cast<long double>(value.get<uint64_t>())
              : value.is_number_integer() ? static_cast<long double>(value.get<int64_t>())
                                          : static_cast<long double>(value.get<double>());
    if (!q.ok) q.error = "is not a finite number";
    return q;
  }
  return bad(value.dump(), std::string("expected a string or a number, got ") + value.type_name());
}

}  // namespace weft::kube
