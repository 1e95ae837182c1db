// Elastic gangs (spec.elastic): which sizes a job may take and the spec's
// rules, when the gang shrinks, holds or grows (elastic_policy.h), what a
// smaller gang's pods are told, status round trips, and the CRD's fields.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "test_builders.h"
#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "trainingjob/elastic_policy.h"

namespace weft::tj {
namespace {
using std::chrono::seconds;
using testing::ExpectFirstSpecError;
using testing::MakeJob;
using Kind = ElasticDecision::Kind;

Json elastic(int min, int placement = 60, int grow = 300) {
  return {{"minReplicas", min}, {"placementTimeoutSeconds", placement}, {"growCheckSeconds", grow}};
}

TEST(Elastic, SizesAreThoseThatShareThePlannedBatchAndLayout) {
  EXPECT_EQ(MakeJob("j", "n").Replicas(4).TypedSpec().elastic_sizes(), (std::vector<int>{4}));  // not elastic
  EXPECT_EQ(MakeJob("j", "n").Replicas(4).Spec("elastic", elastic(1)).TypedSpec().elastic_sizes(),
            (std::vector<int>{1, 2, 4}));
  // 3 micro-batches a rank on 4 ranks: 12 micro-batches, which 3 ranks share too.
  MakeJob accum = MakeJob("j", "n").Replicas(4).Spec("elastic", elastic(1));
  Json worker = {{"preset", "tiny"}, {"train", {{"grad_accum", 3}}}};
  EXPECT_EQ(accum.Spec("worker", worker).TypedSpec().elastic_sizes(), (std::vector<int>{1, 2, 3, 4}));
  // ISP sp 2: a gang needs an even number of ranks.
  EXPECT_EQ(MakeJob("j", "n").Replicas(8).Parallel("isp", 2, 1).Spec("elastic", elastic(2)).TypedSpec().elastic_sizes(),
            (std::vector<int>{2, 4, 8}));
  // Two ranks a pod: 3 pods are 6 ranks, which cannot share 8 micro-batches.
  EXPECT_EQ(MakeJob("j", "n").Replicas(4).Spec("procsPerPod", 2).Spec("elastic", elastic(1)).TypedSpec().elastic_sizes(),
            (std::vector<int>{1, 2, 4}));
}

TEST(Elastic, SpecRulesNameTheField) {
  ExpectFirstSpecError(MakeJob("j", "n").Replicas(4).Spec("elastic", elastic(2)).Obj(), "");
  ExpectFirstSpecError(MakeJob("j", "n").Replicas(4).Spec("elastic", elastic(0)).Obj(), "spec.elastic.minReplicas");
  ExpectFirstSpecError(MakeJob("j", "n").Replicas(4).Spec("elastic", elastic(5)).Obj(), "spec.elastic.minReplicas");
  ExpectFirstSpecError(MakeJob("j", "n").Replicas(4).Spec("elastic", elastic(2, 0)).Obj(),
                       "spec.elastic.placementTimeoutSeconds");
  ExpectFirstSpecError(MakeJob("j", "n").Replicas(4).Spec("elastic", elastic(2, 60, 0)).Obj(),
                       "spec.elastic.growCheckSeconds");
  ExpectFirstSpecError(MakeJob("j", "n").Replicas(4).Spec("elastic", "yes").Obj(), "spec.elastic");
  // 3 pods cannot train 4 ranks' batch: refused with the sizes that can.
  std::vector<SpecError> errors = validate(MakeJob("j", "n").Replicas(4).Spec("elastic", elastic(3)).TypedSpec());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "spec.elastic.minReplicas");
  EXPECT_NE(errors[0].message.find("3 pods (3 ranks) cannot train the global batch planned for 4 ranks x "
                                   "train.grad_accum 1"),
            std::string::npos)
      << errors[0].message;
  EXPECT_NE(errors[0].message.find("the pod counts that can: 1, 2, 4"), std::string::npos) << errors[0].message;
}

RankState placed(int rank, bool ready = true) {
  RankState r;
  r.rank = rank;
  r.phase = "Running";
  r.ready = ready;
  r.scheduled = true;
  return r;
}

RankState held(int rank) {
  RankState r;
  r.rank = rank;
  r.unschedulable = "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable.";
  return r;
}

GangObservation gang(std::initializer_list<RankState> ranks) {
  GangObservation g;
  g.replicas = static_cast<int>(ranks.size());
  g.launched = true;
  g.ranks = ranks;
  return g;
}

const TimePoint t0 = *parse_time("2026-11-28T10:00:00Z");

TEST(ElasticPolicy, ShrinksToThePlacedPodsOnlyAfterThePlacementTimeout) {
  const TrainingJobSpec spec = MakeJob("j", "n").Replicas(4).Spec("elastic", elastic(2, 30)).TypedSpec();
  const GangObservation g = gang({placed(0, false), placed(1, false), held(2), held(3)});
  ElasticDecision d = decide_elastic(spec, g, t0, std::nullopt, false, t0 + seconds(10));
  EXPECT_EQ(d.kind, Kind::Keep);
  ASSERT_TRUE(d.recheck_in);
  EXPECT_NEAR(d.recheck_in->count(), 20000, 50);  // when the timeout runs out
  d = decide_elastic(spec, g, t0, std::nullopt, false, t0 + seconds(30));
  EXPECT_EQ(d.kind, Kind::Shrink);
  EXPECT_EQ(d.replicas, 2);
  EXPECT_EQ(d.reason, kReasonShrunk);
  EXPECT_NE(d.message.find("2 of 4 pods placed after 30s; the scheduler: 0/2 nodes are available"), std::string::npos)
      << d.message;
  EXPECT_NE(d.message.find("training on 2 pods of the planned 4 pods"), std::string::npos) << d.message;
  // 3 placed: 3 pods cannot share 4 ranks' batch, so 2.
  d = decide_elastic(spec, gang({placed(0), placed(1), placed(2), held(3)}), t0, std::nullopt, false, t0 + seconds(31));
  EXPECT_EQ(d.kind, Kind::Shrink);
  EXPECT_EQ(d.replicas, 2);
  // Every pod placed: nothing to do (the ranks are still joining).
  d = decide_elastic(spec, gang({placed(0, false), placed(1, false), placed(2, false), placed(3, false)}), t0,
                     std::nullopt, false, t0 + seconds(90));
  EXPECT_EQ(d.kind, Kind::Keep);
  EXPECT_FALSE(d.recheck_in);
}

TEST(ElasticPolicy, HoldsWhenNotEvenTheMinimumIsPlaced) {
  const TrainingJobSpec spec = MakeJob("j", "n").Replicas(4).Spec("elastic", elastic(2, 30)).TypedSpec();
  const ElasticDecision d =
      decide_elastic(spec, gang({placed(0, false), held(1), held(2), held(3)}), t0, std::nullopt, false, t0 + seconds(40));
  EXPECT_EQ(d.kind, Kind::Hold);
  EXPECT_EQ(d.reason, kReasonMinimumUnplaced);
  EXPECT_NE(d.message.find("1 of 4 pods placed after 30s"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("spec.elastic.minReplicas is 2"), std::string::npos) << d.message;
  EXPECT_TRUE(d.recheck_in);
}

TEST(ElasticPolicy, AGangSchedulerPlacesAllOrNoneSoTheNextSmallerSizeIsTried) {
  const TrainingJobSpec spec = MakeJob("j", "n")
                                   .Replicas(4)
                                   .Spec("elastic", elastic(1, 30))
                                   .Spec("scheduling", {{"gang", "podgroup"}})
                                   .TypedSpec();
  const ElasticDecision d =
      decide_elastic(spec, gang({held(0), held(1), held(2), held(3)}), t0, std::nullopt, false, t0 + seconds(30));
  EXPECT_EQ(d.kind, Kind::Shrink);
  EXPECT_EQ(d.replicas, 2);
}

TEST(ElasticPolicy, ASmallerGangTriesThePlannedSizeAfterGrowCheckSeconds) {
  TrainingJobSpec spec = MakeJob("j", "n").Replicas(4).Spec("elastic", elastic(2, 30, 120)).TypedSpec();
  spec.replicas = 2;  // the current gang
  const GangObservation training = gang({placed(0), placed(1)});
  const TimePoint resized = t0, launched = t0 + seconds(5);
  ElasticDecision d = decide_elastic(spec, training, launched, resized, true, t0 + seconds(60));
  EXPECT_EQ(d.kind, Kind::Keep);
  ASSERT_TRUE(d.recheck_in);
  EXPECT_NEAR(d.recheck_in->count(), 65000, 50);  // counted from the launch, the later of the two
  d = decide_elastic(spec, training, launched, resized, true, t0 + seconds(125));
  EXPECT_EQ(d.kind, Kind::Grow);
  EXPECT_EQ(d.replicas, 4);
  EXPECT_EQ(d.reason, kReasonGrowing);
  EXPECT_NE(d.message.find("trying the planned 4 pods again"), std::string::npos) << d.message;
  // Not while a rank is not training yet, and never past the planned size.
  EXPECT_EQ(decide_elastic(spec, gang({placed(0), placed(1, false)}), launched, resized, false, t0 + seconds(500)).kind,
            Kind::Keep);
  spec.replicas = 4;
  EXPECT_EQ(decide_elastic(spec, gang({placed(0), placed(1), placed(2), placed(3)}), launched, resized, true,
                           t0 + seconds(500))
                .kind,
            Kind::Keep);
}

TEST(ElasticPolicy, AJobWithoutElasticNeverResizes) {
  const TrainingJobSpec spec = MakeJob("j", "n").Replicas(4).TypedSpec();
  const ElasticDecision d =
      decide_elastic(spec, gang({placed(0), held(1), held(2), held(3)}), t0, std::nullopt, false, t0 + seconds(9999));
  EXPECT_EQ(d.kind, Kind::Keep);
  EXPECT_FALSE(d.recheck_in);
}

// A smaller gang's pods carry its own WORLD_SIZE and the planned one; a gang
// at its planned size is told nothing more than a job without spec.elastic.
TEST(Elastic, ASmallerGangsPodsAreToldThePlannedWorldSize) {
  const MakeJob make = MakeJob("llm", "team").Replicas(4).Spec("procsPerPod", 2).Spec("elastic", elastic(1));
  TrainingJobSpec spec = make.TypedSpec();
  const Json job = make.Obj();
  auto env_of = [&](const TrainingJobSpec& s) {
    std::map<std::string, std::string> env;
    const Json pod = build_pod(job, s, 0, 3);
    for (const auto& e : pod["spec"]["containers"][0]["env"])
      if (e.contains("value") && e["value"].is_string()) env[e["name"].get<std::string>()] = e["value"].get<std::string>();
    return env;
  };
  EXPECT_EQ(env_of(spec).count("WEFT_PLANNED_WORLD_SIZE"), 0u);
  EXPECT_EQ(env_of(spec)["WORLD_SIZE"], "8");
  spec.replicas = 2;
  EXPECT_EQ(env_of(spec)["WORLD_SIZE"], "4");
  EXPECT_EQ(env_of(spec)["WEFT_PLANNED_WORLD_SIZE"], "8");
}

TEST(Elastic, StatusRoundTripsAndShowsTheSize) {
  TrainingJobStatus st;
  st.elastic = ElasticStatus{2, 4, 3, "2026-11-28T10:00:00Z"};
  const Json j = to_json(st);
  EXPECT_EQ(j["elastic"]["size"], "2/4");
  const TrainingJobStatus back = parse_status(j);
  ASSERT_TRUE(back.elastic);
  EXPECT_EQ(back.elastic->current_replicas, 2);
  EXPECT_EQ(back.elastic->planned_replicas, 4);
  EXPECT_EQ(back.elastic->resizes, 3);
  EXPECT_EQ(back.elastic->last_resize_time, "2026-11-28T10:00:00Z");
  // A size out of range is reported and dropped: the job starts over at its planned size.
  std::vector<SpecError> errors;
  EXPECT_FALSE(parse_status({{"elastic", {{"currentReplicas", 5}, {"plannedReplicas", 4}}}}, &errors).elastic);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "status.elastic");
}

TEST(Elastic, TheCrdOffersTheFieldsAndTheSizeColumn) {
  for (const char* file : {"/charts/weft/crds/weft.dev_trainingjobs.yaml", "/manifests/crd/weft.dev_trainingjobs.yaml"}) {
    YAML::Node crd = YAML::LoadFile(std::string(WEFT_SOURCE_DIR) + file);
    YAML::Node version = crd["spec"]["versions"][0];
    YAML::Node e = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["elastic"]["properties"];
    ASSERT_TRUE(e) << "spec.elastic not found in " << file;
    EXPECT_EQ(e["minReplicas"]["minimum"].as<int>(), 1) << file;
    EXPECT_EQ(e["placementTimeoutSeconds"]["default"].as<int>(), ElasticSpec{}.placement_timeout_seconds) << file;
    EXPECT_EQ(e["placementTimeoutSeconds"]["minimum"].as<int>(), 1) << file;
    EXPECT_EQ(e["placementTimeoutSeconds"]["maximum"].as<int>(), 86400) << file;
    EXPECT_EQ(e["growCheckSeconds"]["default"].as<int>(), ElasticSpec{}.grow_check_seconds) << file;
    EXPECT_EQ(e["growCheckSeconds"]["maximum"].as<int>(), 604800) << file;
    bool column = false;
    for (const auto& c : version["additionalPrinterColumns"])
      column |= c["name"].as<std::string>() == "Size" && c["jsonPath"].as<std::string>() == ".status.elastic.size";
    EXPECT_TRUE(column) << "no Size column in " << file;
    EXPECT_TRUE(version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["elastic"]) << file;
  }
}

}  // namespace
}  // namespace weft::tj
