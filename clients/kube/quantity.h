// Kubernetes resource quantities ("64Mi", "1G", "1e9", "500m", 1073741824),
// read the way the API server reads them (apimachinery's resource.Quantity):
// an optional sign, a decimal number, and one suffix: binary Ki Mi Gi Ti Pi
// Ei, decimal n u m (none) k M G T P E, or an exponent e<int> / E<int>.
// Anything else, "K" and "MB" included, is not a quantity. No cpprest here.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace weft::kube {

struct Quantity {
  bool ok = false;
  long double value = 0;  // in base units (bytes for memory, cores for cpu)
  std::string error;      // why it is not a quantity, when !ok

  // The value rounded up to a whole unit, as Quantity.Value() does; saturates
  // at INT64_MAX.
  int64_t ceil_int64() const;
};

Quantity parse_quantity(const std::string& text);
// A ResourceList value: a string as above or a JSON number (the CRD's
// int-or-string).
Quantity parse_quantity(const nlohmann::json& value);

}  // namespace weft::kube
