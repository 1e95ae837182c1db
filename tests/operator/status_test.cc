// status.tuning: the typed record the bucket-size tuner writes. Round trips
// through JSON, survives a whole-status round trip, and reports bad input
// with field paths instead of throwing or silently defaulting.
#include <gtest/gtest.h>

#include "trainingjob/types.h"

namespace weft::tj {
namespace {

TuningStatus searching() {
  TuningStatus t;
  t.state = TuningState::Searching;
  t.current_bucket_mb = 8;
  t.trials.push_back({.bucket_mb = 4, .steps = 20, .median_step_seconds = 0.25, .exposed_comm_seconds = 0.05,
                      .score = 0.3});
  TuningTrial under_way;  // no scores yet
  under_way.bucket_mb = 8;
  under_way.steps = 7;
  t.trials.push_back(under_way);
  return t;
}

TuningStatus converged() {
  TuningStatus t = searching();
  t.trials[1] = {.bucket_mb = 8, .steps = 20, .median_step_seconds = 0.2, .exposed_comm_seconds = 0.01, .score = 0.21};
  t.state = TuningState::Converged;
  t.chosen_bucket_mb = 8;
  return t;
}

TEST(TuningStatus, RoundTripsThroughJson) {
  for (const TuningStatus& t : {searching(), converged(), TuningStatus{TuningState::Stopped, 25, {}, {}}}) {
    SCOPED_TRACE(to_json(t).dump());
    std::vector<SpecError> errors;
    EXPECT_EQ(parse_tuning(to_json(t), &errors), t);
    EXPECT_TRUE(errors.empty()) << describe(errors);
  }
}

TEST(TuningStatus, JsonFieldsAreTheCrdNames) {
  const Json j = to_json(converged());
  EXPECT_EQ(j["state"], "Converged");
  EXPECT_EQ(j["currentBucketMB"], 8.0);  // the printer column's path
  EXPECT_EQ(j["chosenBucketMB"], 8.0);
  ASSERT_EQ(j["trials"].size(), 2u);
  EXPECT_EQ(j["trials"][0], Json::parse(R"({"bucketMB": 4.0, "steps": 20, "medianStepSeconds": 0.25,
                                             "exposedCommSeconds": 0.05, "score": 0.3})"));
  EXPECT_EQ(j["trials"][1]["steps"], 20);
  EXPECT_FALSE(to_json(searching()).contains("chosenBucketMB"));
  EXPECT_FALSE(to_json(searching())["trials"][1].contains("score"));
}

TEST(TuningStatus, ParsesWhatTheApiServerStores) {
  // Integers where the schema says number, as the API server may return them.
  std::vector<SpecError> errors;
  auto t = parse_tuning(Json::parse(R"({"state": "Searching", "currentBucketMB": 4,
                                        "trials": [{"bucketMB": 2, "steps": 3}]})"),
                        &errors);
  EXPECT_TRUE(errors.empty()) << describe(errors);
  EXPECT_EQ(t.current_bucket_mb, 4.0);
  ASSERT_EQ(t.trials.size(), 1u);
  EXPECT_EQ(t.trials[0].bucket_mb, 2.0);
  EXPECT_EQ(t.trials[0].steps, 3);
  EXPECT_FALSE(t.trials[0].score);
}

TEST(TuningStatus, BadInputIsReportedWithItsPath) {
  struct Row { std::string name; std::string json; std::string want_field; };
  const std::vector<Row> rows = {
      {"not an object", R"([1, 2])", "status.tuning"},
      {"unknown state", R"({"state": "Tuning", "currentBucketMB": 4})", "status.tuning.state"},
      {"state not a string", R"({"state": 1, "currentBucketMB": 4})", "status.tuning.state"},
      {"current missing", R"({"state": "Searching"})", "status.tuning.currentBucketMB"},
      {"current zero", R"({"currentBucketMB": 0})", "status.tuning.currentBucketMB"},
      {"current a string", R"({"currentBucketMB": "4"})", "status.tuning.currentBucketMB"},
      {"converged without a choice", R"({"state": "Converged", "currentBucketMB": 4})",
       "status.tuning.chosenBucketMB"},
      {"a choice while searching", R"({"state": "Searching", "currentBucketMB": 4, "chosenBucketMB": 4})",
       "status.tuning.chosenBucketMB"},
      {"chosen negative", R"({"state": "Converged", "currentBucketMB": 4, "chosenBucketMB": -1})",
       "status.tuning.chosenBucketMB"},
      {"trials not an array", R"({"currentBucketMB": 4, "trials": {}})", "status.tuning.trials"},
      {"trial not an object", R"({"currentBucketMB": 4, "trials": [{"bucketMB": 1}, 3]})",
       "status.tuning.trials[1]"},
      {"trial without size", R"({"currentBucketMB": 4, "trials": [{"steps": 3}]})",
       "status.tuning.trials[0].bucketMB"},
      {"fractional steps", R"({"currentBucketMB": 4, "trials": [{"bucketMB": 1, "steps": 2.5}]})",
       "status.tuning.trials[0].steps"},
      {"negative steps", R"({"currentBucketMB": 4, "trials": [{"bucketMB": 1, "steps": -1}]})",
       "status.tuning.trials[0].steps"},
      {"negative score", R"({"currentBucketMB": 4, "trials": [{"bucketMB": 1, "score": -0.5}]})",
       "status.tuning.trials[0].score"},
      {"seconds a string", R"({"currentBucketMB": 4, "trials": [{"bucketMB": 1, "medianStepSeconds": "1s"}]})",
       "status.tuning.trials[0].medianStepSeconds"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    std::vector<SpecError> errors;
    TuningStatus t;
    ASSERT_NO_THROW(t = parse_tuning(Json::parse(r.json), &errors));
    ASSERT_EQ(errors.size(), 1u) << describe(errors);
    EXPECT_EQ(errors[0].field, r.want_field) << describe(errors);
    // What the operator would write back is well-typed: a known state and
    // numbers where the schema wants numbers.
    const Json out = to_json(t);
    EXPECT_TRUE(out["state"] == "Searching" || out["state"] == "Converged" || out["state"] == "Stopped");
    EXPECT_TRUE(out["currentBucketMB"].is_number());
    for (const auto& trial : out["trials"]) EXPECT_TRUE(trial["steps"].is_number_integer() && trial["steps"] >= 0);
  }
}

TEST(TuningStatus, BadFieldKeepsItsDefaultAndTheRestIsRead) {
  std::vector<SpecError> errors;
  auto t = parse_tuning(Json::parse(R"({"state": "Searching", "currentBucketMB": 4,
                                        "trials": [{"bucketMB": 2, "steps": "many", "score": 0.5}]})"),
                        &errors);
  ASSERT_EQ(errors.size(), 1u);
  ASSERT_EQ(t.trials.size(), 1u);
  EXPECT_EQ(t.trials[0].bucket_mb, 2.0);
  EXPECT_EQ(t.trials[0].steps, 0);
  EXPECT_EQ(t.trials[0].score, 0.5);
}

TEST(TrainingJobStatus, CarriesTuningAndProgressThroughARoundTrip) {
  Json in = {{"phase", "Running"},
             {"observedGeneration", 3},
             {"attempt", 1},
             {"readyReplicas", 2},
             {"restarts", 0},
             {"conditions", Json::array()},
             {"progress", {{"step", 120}, {"loss", 2.5}}},
             {"tuning", to_json(converged())}};
  std::vector<SpecError> errors;
  TrainingJobStatus st = parse_status(in, &errors);
  EXPECT_TRUE(errors.empty()) << describe(errors);
  ASSERT_TRUE(st.tuning);
  EXPECT_EQ(*st.tuning, converged());
  EXPECT_EQ(to_json(st), in);
}

TEST(TrainingJobStatus, NoTuningUntilTheTunerWritesIt) {
  TrainingJobStatus st = parse_status({{"phase", "Pending"}});
  EXPECT_FALSE(st.tuning);
  EXPECT_FALSE(to_json(st).contains("tuning"));
}

TEST(TrainingJobStatus, BadTuningIsReportedNotThrown) {
  std::vector<SpecError> errors;
  TrainingJobStatus st = parse_status({{"phase", "Running"}, {"tuning", {{"state", "Bogus"}, {"currentBucketMB", 4}}}},
                                      &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "status.tuning.state");
  EXPECT_EQ(st.phase, "Running");
  ASSERT_TRUE(st.tuning);
  EXPECT_EQ(st.tuning->current_bucket_mb, 4.0);
}

}  // namespace
}  // namespace weft::tj
