#include "kube/base64.h"

#include <openssl/evp.h>

namespace weft::kube {

std::optional<std::string> base64_decode(std::string_view in) {
  std::string text;
  text.reserve(in.size());
  for (char c : in)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') text += c;
  if (text.size() % 4 != 0) return std::nullopt;
  // EVP_DecodeBlock checks the alphabet but decodes '=' anywhere as zero
  // bits and counts padding as output, so padding is checked and
  // subtracted here.
  size_t pad = 0;
  while (pad < 2 && pad < text.size() && text[text.size() - 1 - pad] == '=') ++pad;
  if (text.find('=') < text.size() - pad) return std::nullopt;
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

}  // namespace weft::kube
