// Small builders for table-driven operator tests, in the style of
// jobset's MakeJobSet(name, ns).Replicas(..).Obj(): each call sets one fact,
// Obj() returns the value.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "trainingjob/gang.h"
#include "trainingjob/types.h"

namespace weft::tj::testing {

using Json = nlohmann::json;

class MakeJob {
 public:
  MakeJob(const std::string& name, const std::string& ns) {
    j_ = {{"apiVersion", "weft.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"uid", name + "-uid"}, {"generation", 1}}},
          {"spec", {{"replicas", 2}, {"image", "weft:test"}, {"worker", {{"preset", "tiny"}}}}}};
  }
  MakeJob& Replicas(int n) { j_["spec"]["replicas"] = n; return *this; }
  MakeJob& Image(const std::string& i) { j_["spec"]["image"] = i; return *this; }
  MakeJob& Parallel(const std::string& strategy, int sp, int wp) {
    j_["spec"]["worker"]["parallel"] = {{"strategy", strategy}, {"sp", sp}, {"wp", wp}};
    return *this;
  }
  MakeJob& BucketMB(double mb) { j_["spec"]["worker"]["parallel"]["bucket_cap_mb"] = mb; return *this; }
  MakeJob& MaxRestarts(int n) { j_["spec"]["restartPolicy"]["maxRestarts"] = n; return *this; }
  MakeJob& Backoff(int s, int max_s = 300) {
    j_["spec"]["restartPolicy"]["backoffSeconds"] = s;
    j_["spec"]["restartPolicy"]["maxBackoffSeconds"] = max_s;
    return *this;
  }
  MakeJob& Suspend(bool s = true) { j_["spec"]["suspend"] = s; return *this; }
  MakeJob& TTL(int s) { j_["spec"]["ttlSecondsAfterFinished"] = s; return *this; }
  MakeJob& Template(const Json& t) { j_["spec"]["template"] = t; return *this; }
  MakeJob& Spec(const std::string& key, const Json& v) { j_["spec"][key] = v; return *this; }
  Json Obj() const { return j_; }
  TrainingJobSpec TypedSpec() const { return parse_spec(j_["spec"]); }

 private:
  Json j_;
};

class MakeGang {
 public:
  explicit MakeGang(int replicas) { g_.replicas = replicas; }
  MakeGang& Attempt(int a) { g_.attempt = a; return *this; }
  MakeGang& Launched(bool l = true) { g_.launched = l; return *this; }
  MakeGang& AllRunning() {
    for (int r = 0; r < g_.replicas; ++r) Running(r);
    return *this;
  }
  MakeGang& Pending(int rank) { return add(rank, "Pending", false, {}); }
  MakeGang& Running(int rank, bool ready = true) { return add(rank, "Running", ready, {}); }
  MakeGang& Succeeded(int rank) { return add(rank, "Succeeded", false, 0); }
  MakeGang& Failed(int rank, std::optional<int> code, const std::string& reason = "") {
    add(rank, "Failed", false, code);
    g_.ranks.back().reason = reason;
    return *this;
  }
  MakeGang& Message(const std::string& m) {  // the last rank added
    g_.ranks.back().message = m;
    return *this;
  }
  MakeGang& ContainerReason(const std::string& r) {  // the last rank added, e.g. OOMKilled
    g_.ranks.back().container_reason = r;
    return *this;
  }
  MakeGang& Disruption(const std::string& r) {  // the last rank added: DisruptionTarget's reason
    g_.ranks.back().disruption = r;
    return *this;
  }
  MakeGang& BeingDeleted() {  // the last rank added
    g_.ranks.back().terminating = true;
    return *this;
  }
  MakeGang& Terminating(int rank) {
    add(rank, "Running", false, {});
    g_.ranks.back().terminating = true;
    return *this;
  }
  MakeGang& Missing(int rank) { g_.missing_ranks.push_back(rank); return *this; }
  // A rank whose pod is being deleted, marked with a DisruptionTarget reason.
  MakeGang& Leaving(int rank, const std::string& disruption) {
    g_.missing_ranks.push_back(rank);
    RankState r;
    r.rank = rank;
    r.terminating = true;
    r.disruption = disruption;
    g_.leaving.push_back(r);
    return *this;
  }
  GangObservation Obj() const { return g_; }

 private:
  MakeGang& add(int rank, const std::string& phase, bool ready, std::optional<int> code) {
    RankState s;
    s.rank = rank;
    s.phase = phase;
    s.ready = ready;
    s.exit_code = code;
    g_.ranks.push_back(s);
    return *this;
  }
  GangObservation g_;
};

inline RestartSpec Restarts(int max, int backoff = 10, int max_backoff = 300) { return {max, backoff, max_backoff}; }

// A spec table's row: the job parses and validates without an error
// (`want_field` empty), or its first error names `want_field`.
inline void ExpectFirstSpecError(const Json& job, const std::string& want_field) {
  std::vector<SpecError> errors;
  auto spec = parse_spec(job["spec"], &errors);
  for (auto& e : validate(spec)) errors.push_back(e);
  if (want_field.empty()) {
    EXPECT_TRUE(errors.empty()) << describe(errors);
  } else {
    ASSERT_FALSE(errors.empty());
    EXPECT_EQ(errors.front().field, want_field) << describe(errors);
  }
}

}  // namespace weft::tj::testing
