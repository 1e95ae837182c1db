// kube::base64_decode, the one decoder of kubeconfig *-data and of the
// Secret/ConfigMap bytes weft-node mounts: padded standard base64 as Go's
// StdEncoding writes it, whitespace skipped, anything else refused.
#include "kube/base64.h"

#include <gtest/gtest.h>

namespace weft::kube {
namespace {

TEST(Base64, DecodesPaddedStandardBase64) {
  EXPECT_EQ(base64_decode(""), "");
  EXPECT_EQ(base64_decode("YQ=="), "a");
  EXPECT_EQ(base64_decode("YWI="), "ab");
  EXPECT_EQ(base64_decode("YWJj"), "abc");
  EXPECT_EQ(base64_decode("czNjcjN0"), "s3cr3t");
  EXPECT_EQ(base64_decode("AP8A/w=="), std::string("\x00\xff\x00\xff", 4));
  EXPECT_EQ(base64_decode("+/+/"), "\xfb\xff\xbf");
}

TEST(Base64, SkipsWhitespaceAsInWrappedPem) {
  EXPECT_EQ(base64_decode(" LS0t\nQ0Et\r\nLS0t\tPQ==\n"), "---CA----=");
  EXPECT_EQ(base64_decode("YW\nJj"), "abc");
}

TEST(Base64, RefusesWhatIsNotPaddedStandardBase64) {
  EXPECT_EQ(base64_decode("YWI"), std::nullopt) << "unpadded";
  EXPECT_EQ(base64_decode("Y=Q="), std::nullopt) << "padding inside";
  EXPECT_EQ(base64_decode("Y==="), std::nullopt) << "three padding characters";
  EXPECT_EQ(base64_decode("YW-_"), std::nullopt) << "the URL alphabet";
  EXPECT_EQ(base64_decode("YQ==YQ=="), std::nullopt) << "data after padding";
  EXPECT_EQ(base64_decode("!!!!"), std::nullopt);
}

}  // namespace
}  // namespace weft::kube
