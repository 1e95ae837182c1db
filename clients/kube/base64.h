// Decodes the base64 of Kubernetes' byte fields: kubeconfig's *-data,
// Secret data, ConfigMap binaryData. These are Go []byte, written with
// encoding/base64's StdEncoding: the standard alphabet, padded with '='.
// defines: base64_decode.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace weft::kube {

// The bytes `in` encodes, or nullopt when it is not padded standard base64.
// Whitespace (space, tab, CR, LF) is skipped anywhere, as in a wrapped PEM
// block pasted into YAML.
std::optional<std::string> base64_decode(std::string_view in);

}  // namespace weft::kube
