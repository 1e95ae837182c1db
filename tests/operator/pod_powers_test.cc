// check_pod_powers: which spec.template fields a job may use with the
// operator's settings. Each refused field is named in the error, with the
// setting that would allow it; the allowed settings let the same fields pass.
#include <gtest/gtest.h>

#include "test_builders.h"
#include "trainingjob/builders.h"
#include "trainingjob/pod_powers.h"

namespace weft::tj {
namespace {
using testing::MakeJob;

const Json kHostPath = {{"name", "ckpt"}, {"hostPath", {{"path", "/tmp/ckpt"}, {"type", "DirectoryOrCreate"}}}};
const Json kToken = {{"name", "api"},
                     {"projected",
                      {{"sources",
                        {{{"configMap", {{"name", "ca"}}}},
                         {{"serviceAccountToken", {{"path", "token"}, {"expirationSeconds", 3600}}}}}}}}};
const Json kEmptyDir = {{"name", "data"}, {"emptyDir", Json::object()}};
const Json kProjectedConfig = {{"name", "cfg"}, {"projected", {{"sources", {{{"configMap", {{"name", "x"}}}}}}}}};

std::vector<std::string> refused_fields(const Json& tpl, PodPowers allow) {
  std::vector<std::string> out;
  for (const auto& e : check_pod_powers(MakeJob("j", "ns").Template(tpl).TypedSpec(), allow)) out.push_back(e.field);
  return out;
}

TEST(PodPowers, Table) {
  using V = std::vector<std::string>;
  const PodPowers none, host{.host_path = true}, sa{.service_account = true}, net{.host_network = true},
      all{true, true, true};
  struct Case {
    const char* what;
    Json tpl;
    PodPowers allow;
    V refused;
  };
  const std::vector<Case> cases = {
      {"no template", Json::object(), none, {}},
      {"emptyDir and a projected ConfigMap", {{"volumes", {kEmptyDir, kProjectedConfig}}}, none, {}},
      {"hostPath", {{"volumes", {kEmptyDir, kHostPath}}}, none, {"spec.template.volumes[1].hostPath"}},
      {"hostPath allowed", {{"volumes", {kHostPath}}}, host, {}},
      {"hostPath with only service accounts allowed", {{"volumes", {kHostPath}}}, sa,
       {"spec.template.volumes[0].hostPath"}},
      {"token projection", {{"volumes", {kToken}}}, none, {"spec.template.volumes[0].projected.sources[1].serviceAccountToken"}},
      {"token projection with only hostPath allowed", {{"volumes", {kToken}}}, host,
       {"spec.template.volumes[0].projected.sources[1].serviceAccountToken"}},
      {"token projection allowed", {{"volumes", {kToken}}}, sa, {}},
      {"serviceAccountName", {{"serviceAccountName", "deployer"}}, none, {"spec.template.serviceAccountName"}},
      {"serviceAccountName allowed", {{"serviceAccountName", "deployer"}}, sa, {}},
      {"the default ServiceAccount by name", {{"serviceAccountName", "default"}}, none, {}},
      {"everything at once", {{"serviceAccountName", "ci"}, {"volumes", {kToken, kEmptyDir, kHostPath}}}, none,
       {"spec.template.serviceAccountName", "spec.template.volumes[0].projected.sources[1].serviceAccountToken",
        "spec.template.volumes[2].hostPath"}},
      {"hostNetwork", {{"hostNetwork", true}}, none, {"spec.template.hostNetwork"}},
      {"hostNetwork with hostPath allowed", {{"hostNetwork", true}}, host, {"spec.template.hostNetwork"}},
      {"hostNetwork allowed", {{"hostNetwork", true}, {"dnsPolicy", "ClusterFirstWithHostNet"}}, net, {}},
      {"hostNetwork false", {{"hostNetwork", false}}, none, {}},
      {"everything at once, all allowed",
       {{"serviceAccountName", "ci"}, {"hostNetwork", true}, {"volumes", {kToken, kHostPath}}}, all, {}},
  };
  for (const auto& c : cases) EXPECT_EQ(refused_fields(c.tpl, c.allow), c.refused) << c.what;
}

TEST(PodPowers, MessagesNameTheVolumeAndTheSettingThatAllowsIt) {
  auto errors = check_pod_powers(MakeJob("j", "ns").Template({{"volumes", {kHostPath}}}).TypedSpec(), {});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("'ckpt'"), std::string::npos) << errors[0].message;
  EXPECT_NE(errors[0].message.find("--allow-host-path"), std::string::npos) << errors[0].message;
  EXPECT_NE(errors[0].message.find("operator.allowHostPath"), std::string::npos) << errors[0].message;
  errors = check_pod_powers(MakeJob("j", "ns").Template({{"serviceAccountName", "deployer"}}).TypedSpec(), {});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("'deployer'"), std::string::npos) << errors[0].message;
  EXPECT_NE(errors[0].message.find("--allow-service-account"), std::string::npos) << errors[0].message;
  // describe() is what the Failed condition and the event carry.
  EXPECT_NE(describe(errors).find("spec.template.serviceAccountName: "), std::string::npos);
  errors = check_pod_powers(MakeJob("j", "ns").Template({{"hostNetwork", true}}).TypedSpec(), {});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("--allow-host-network"), std::string::npos) << errors[0].message;
  EXPECT_NE(errors[0].message.find("operator.allowHostNetwork"), std::string::npos) << errors[0].message;
}

// Whatever passes the check reaches the pod unchanged: the check, not the
// builder, is what keeps these fields out.
TEST(PodPowers, AllowedFieldsReachThePod) {
  Json job = MakeJob("j", "ns").Template({{"serviceAccountName", "deployer"}, {"volumes", {kHostPath, kToken}}}).Obj();
  const TrainingJobSpec spec = parse_spec(job["spec"]);
  ASSERT_TRUE(check_pod_powers(spec, {.host_path = true, .service_account = true}).empty());
  Json pod = build_pod(job, spec, 0, 0);
  EXPECT_EQ(pod["spec"]["serviceAccountName"], "deployer");
  std::set<std::string> volumes;
  for (const auto& v : pod["spec"]["volumes"]) volumes.insert(v["name"]);
  EXPECT_TRUE(volumes.count("ckpt") && volumes.count("api"));
  // Allowing a ServiceAccount does not mount its token by itself.
  EXPECT_FALSE(pod["spec"]["automountServiceAccountToken"].get<bool>());
}

}  // namespace
}  // namespace weft::tj
