// Gang scheduling (spec.scheduling): the PodGroup of each provider, how the
// pods name it and reach its scheduler, the spec's rules, and the
// GangScheduled condition's policy.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "test_builders.h"
#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "trainingjob/scheduling_policy.h"

namespace weft::tj {
namespace {
using testing::MakeJob;

Json gang(const std::string& provider = "", const Json& extra = Json::object()) {
  Json g = {{"gang", "podgroup"}};
  if (!provider.empty()) g["provider"] = provider;
  for (auto it = extra.begin(); it != extra.end(); ++it) g[it.key()] = it.value();
  return g;
}

TEST(GangScheduling, SchedulerPluginsPodGroupHoldsTheWholeGang) {
  const MakeJob make = MakeJob("llm", "team")
                           .Replicas(4)
                           .Spec("scheduling", gang("", {{"scheduleTimeoutSeconds", 120}}))
                           .Spec("resources", {{"requests", {{"cpu", "500m"}, {"memory", "1Gi"}}},
                                               {"limits", {{"memory", "2Gi"}, {"nvidia.com/gpu", 2}}}});
  const Json job = make.Obj();
  const TrainingJobSpec spec = make.TypedSpec();
  const Json pg = build_podgroup(job, spec);
  EXPECT_EQ(pg["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(pg["kind"], "PodGroup");
  EXPECT_EQ(pg["metadata"]["name"], "llm");
  EXPECT_EQ(pg["metadata"]["namespace"], "team");
  EXPECT_EQ(pg["metadata"]["ownerReferences"][0]["uid"], "llm-uid");
  EXPECT_TRUE(pg["metadata"]["ownerReferences"][0]["controller"].get<bool>());
  EXPECT_EQ(pg["metadata"]["labels"][kLabelJob], "llm");
  EXPECT_EQ(pg["spec"]["minMember"], 4);
  EXPECT_EQ(pg["spec"]["scheduleTimeoutSeconds"], 120);
  EXPECT_FALSE(pg["spec"].contains("queue"));
  // Requests where set, limits otherwise (the API server's default), times
  // the pods: 4 x 500m, 4 x 1Gi (the request, not the 2Gi limit), 4 x 2 GPUs.
  EXPECT_EQ(pg["spec"]["minResources"],
            Json({{"cpu", "2"}, {"memory", std::to_string(4LL << 30)}, {"nvidia.com/gpu", "8"}}));
  EXPECT_EQ(&podgroup_resource(spec), &kube::kPodGroups);

  for (int i = 0; i < 4; ++i) {
    const Json pod = build_pod(job, spec, i, 0);
    EXPECT_EQ(pod["spec"]["schedulerName"], kSchedulerPluginsScheduler);
    EXPECT_EQ(pod["metadata"]["labels"][kLabelPodGroup], "llm");
    EXPECT_FALSE(pod["metadata"]["annotations"].contains(kAnnotationVolcanoGroup));
  }
}

TEST(GangScheduling, VolcanoPodGroupCarriesQueueAndPriority) {
  const MakeJob make = MakeJob("llm", "team")
                           .Replicas(3)
                           .Spec("scheduling", gang("volcano", {{"queue", "research"}}))
                           .Spec("resources", {{"requests", {{"cpu", "1.5"}}}})
                           .Template({{"priorityClassName", "training-high"}});
  const Json job = make.Obj();
  const TrainingJobSpec spec = make.TypedSpec();
  const Json pg = build_podgroup(job, spec);
  EXPECT_EQ(pg["apiVersion"], "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ(pg["spec"]["minMember"], 3);
  EXPECT_EQ(pg["spec"]["queue"], "research");
  EXPECT_EQ(pg["spec"]["priorityClassName"], "training-high");
  EXPECT_EQ(pg["spec"]["minResources"], Json({{"cpu", "4500m"}}));
  EXPECT_FALSE(pg["spec"].contains("scheduleTimeoutSeconds"));
  EXPECT_EQ(&podgroup_resource(spec), &kube::kVolcanoPodGroups);
  const Json pod = build_pod(job, spec, 2, 1);
  EXPECT_EQ(pod["spec"]["schedulerName"], kVolcanoScheduler);
  EXPECT_EQ(pod["metadata"]["annotations"][kAnnotationVolcanoGroup], "llm");
  EXPECT_FALSE(pod["metadata"]["labels"].contains(kLabelPodGroup));
  EXPECT_EQ(pod["spec"]["priorityClassName"], "training-high");
}

TEST(GangScheduling, TheUserCannotTakeTheGroupLabelOrTheSchedulerFromThePods) {
  const MakeJob make = MakeJob("j", "n")
                           .Spec("scheduling", gang("", {{"schedulerName", "coscheduler"}}))
                           .Template({{"labels", {{kLabelPodGroup, "other"}}}});
  const Json pod = build_pod(make.Obj(), make.TypedSpec(), 0, 0);
  EXPECT_EQ(pod["metadata"]["labels"][kLabelPodGroup], "j");
  EXPECT_EQ(pod["spec"]["schedulerName"], "coscheduler");
  EXPECT_FALSE(build_podgroup(make.Obj(), make.TypedSpec())["spec"].contains("minResources"))
      << "no resources, no minResources";
}

TEST(GangScheduling, WithoutItPodsAndHashAreAsBefore) {
  const MakeJob plain = MakeJob("j", "n");
  const Json pod = build_pod(plain.Obj(), plain.TypedSpec(), 0, 0);
  EXPECT_FALSE(pod["spec"].contains("schedulerName"));
  EXPECT_FALSE(pod["metadata"]["labels"].contains(kLabelPodGroup));
  // gang: none stated hashes like no scheduling at all; turning gang
  // scheduling on, or changing its scheduler, relaunches the gang.
  const std::string h = pod_spec_hash(plain.TypedSpec());
  EXPECT_EQ(h, pod_spec_hash(MakeJob("j", "n").Spec("scheduling", {{"gang", "none"}}).TypedSpec()));
  const std::string on = pod_spec_hash(MakeJob("j", "n").Spec("scheduling", gang()).TypedSpec());
  EXPECT_NE(h, on);
  EXPECT_NE(on, pod_spec_hash(MakeJob("j", "n").Spec("scheduling", gang("volcano")).TypedSpec()));
}

TEST(GangScheduling, SpecRules) {
  struct Row { std::string name; Json scheduling; Json tpl; std::string want_field; };
  const std::vector<Row> rows = {
      {"podgroup", gang(), {}, ""},
      {"volcano with a queue", gang("volcano", {{"queue", "q1"}}), {}, ""},
      {"none", {{"gang", "none"}}, {}, ""},
      {"unknown gang", {{"gang", "yes"}}, {}, "spec.scheduling.gang"},
      {"unknown provider", gang("kueue"), {}, "spec.scheduling.provider"},
      {"provider without gang", {{"provider", "volcano"}}, {}, "spec.scheduling.provider"},
      {"queue without gang", {{"queue", "q"}}, {}, "spec.scheduling.queue"},
      {"queue on scheduler-plugins", gang("", {{"queue", "q"}}), {}, "spec.scheduling.queue"},
      {"timeout on volcano", gang("volcano", {{"scheduleTimeoutSeconds", 60}}), {},
       "spec.scheduling.scheduleTimeoutSeconds"},
      {"timeout 0", gang("", {{"scheduleTimeoutSeconds", 0}}), {}, "spec.scheduling.scheduleTimeoutSeconds"},
      {"scheduler name with capitals", gang("", {{"schedulerName", "My_Scheduler"}}), {},
       "spec.scheduling.schedulerName"},
      // Lowercase characters, but no DNS names: no scheduler or Volcano Queue can be called that.
      {"scheduler name with a leading dash", gang("", {{"schedulerName", "-gang-"}}), {},
       "spec.scheduling.schedulerName"},
      {"scheduler name with an empty part", gang("", {{"schedulerName", "a..b"}}), {}, "spec.scheduling.schedulerName"},
      {"dotted scheduler name", gang("", {{"schedulerName", "gang.example.com"}}), {}, ""},
      {"queue ending with a dot", gang("volcano", {{"queue", "research."}}), {}, "spec.scheduling.queue"},
      {"template scheduler beside gang", gang(), {{"schedulerName", "other"}}, "spec.template.schedulerName"},
      {"template scheduler without gang", {{"gang", "none"}}, {{"schedulerName", "other"}}, ""},
      {"gang of the wrong type", {{"gang", true}}, {}, "spec.scheduling.gang"},
      {"scheduling not an object", "podgroup", {}, "spec.scheduling"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    MakeJob make = MakeJob("a", "n").Spec("scheduling", r.scheduling);
    if (!r.tpl.is_null()) make.Template(r.tpl);
    testing::ExpectFirstSpecError(make.Obj(), r.want_field);
  }
}

// The CRD states the same choices, so the API server refuses what the
// operator would refuse.
TEST(GangScheduling, TheCrdOffersTheSameChoices) {
  YAML::Node crd = YAML::LoadFile(std::string(WEFT_SOURCE_DIR) + "/charts/weft/crds/weft.dev_trainingjobs.yaml");
  YAML::Node s = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
                    ["scheduling"]["properties"];
  ASSERT_TRUE(s) << "spec.scheduling not found in the CRD";
  EXPECT_EQ(s["gang"]["enum"].as<std::vector<std::string>>(), (std::vector<std::string>{"none", "podgroup"}));
  EXPECT_EQ(s["gang"]["default"].as<std::string>(), "none");
  EXPECT_EQ(s["provider"]["enum"].as<std::vector<std::string>>(),
            (std::vector<std::string>{"scheduler-plugins", "volcano"}));
  EXPECT_EQ(s["scheduleTimeoutSeconds"]["minimum"].as<int>(), 1);
  EXPECT_EQ(s["scheduleTimeoutSeconds"]["maximum"].as<int>(), 86400);
}

GangObservation pods(std::initializer_list<RankState> ranks) {
  GangObservation g;
  g.replicas = static_cast<int>(ranks.size());
  g.ranks = ranks;
  return g;
}

RankState placed(int rank) {
  RankState r;
  r.rank = rank;
  r.scheduled = true;
  return r;
}

RankState held(int rank, const std::string& why = "") {
  RankState r;
  r.rank = rank;
  r.unschedulable = why;
  return r;
}

TEST(GangScheduling, ConditionSaysWhyTheGangIsNotPlaced) {
  const TrainingJobSpec spec = MakeJob("llm", "n").Replicas(3).Spec("scheduling", gang()).TypedSpec();
  EXPECT_FALSE(scheduling_condition(MakeJob("llm", "n").TypedSpec(), "llm", pods({held(0)}), ""))
      << "no condition without gang scheduling";

  auto v = scheduling_condition(spec, "llm", pods({held(0), held(1), held(2)}), "");
  ASSERT_TRUE(v);
  EXPECT_FALSE(v->placed);
  EXPECT_EQ(v->reason, kReasonWaitingForScheduler);
  EXPECT_EQ(v->message,
            "0 of 3 pods placed; waiting for scheduler-plugins-scheduler to place the gang (PodGroup llm "
            "(scheduling.x-k8s.io/v1alpha1, minMember 3)); they stay Pending while no scheduler of that name runs");

  const std::string why = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.";
  v = scheduling_condition(spec, "llm", pods({held(0), held(1, why), held(2, why)}), "");
  EXPECT_EQ(v->reason, kReasonUnschedulable);
  EXPECT_EQ(v->message, "scheduler-plugins-scheduler cannot place the gang: 2 of 3 pods unschedulable, 0 placed; "
                        "pod llm-1: " + why);

  v = scheduling_condition(spec, "llm", pods({placed(0), placed(1), placed(2)}), "");
  EXPECT_TRUE(v->placed);
  EXPECT_EQ(v->reason, kReasonGangPlaced);

  const std::string problem = podgroup_problem(spec, 404, "the server could not find the requested resource");
  EXPECT_EQ(problem, "the API server does not serve podgroups.scheduling.x-k8s.io/v1alpha1: install "
                     "scheduler-plugins (its PodGroup CRD) or set spec.scheduling.gang: none; no pods are created "
                     "until the PodGroup exists");
  v = scheduling_condition(spec, "llm", pods({}), problem);
  EXPECT_FALSE(v->placed);
  EXPECT_EQ(v->reason, kReasonPodGroupUnavailable);
  EXPECT_EQ(v->message, problem);
  const TrainingJobSpec volcano = MakeJob("llm", "n").Spec("scheduling", gang("volcano")).TypedSpec();
  EXPECT_NE(podgroup_problem(volcano, 403, "forbidden").find("may not create podgroups.scheduling.volcano.sh/v1beta1"),
            std::string::npos);
}

TEST(GangScheduling, PodsReportTheSchedulersVerdict) {
  Json pod = {{"metadata", {{"labels", {{"weft.dev/rank", "1"}}}}},
              {"spec", Json::object()},
              {"status",
               {{"phase", "Pending"},
                {"conditions",
                 {{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"},
                   {"message", "pod group is not ready"}}}}}}};
  RankState r = observe_pod(pod, kContainerName);
  EXPECT_FALSE(r.scheduled);
  EXPECT_EQ(r.unschedulable, "pod group is not ready");
  pod["spec"]["nodeName"] = "gpu-7";
  EXPECT_TRUE(observe_pod(pod, kContainerName).scheduled);
  pod["spec"].erase("nodeName");
  pod["status"]["phase"] = "Running";
  EXPECT_TRUE(observe_pod(pod, kContainerName).scheduled) << "a running pod was placed";
}

}  // namespace
}  // namespace weft::tj
