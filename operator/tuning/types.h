// The bucket-size tuning vocabulary shared by the reconciler (trainingjob/,
// which parses and writes it as status.tuning and spec.tuning.bucketSize)
// and the tuner (tuner/, which decides on it). Header-only and below both,
// so neither of them includes the other's headers for these types. Sizes in
// MiB.
// defines: BucketTuningSpec, TuningState, tuning_state_name, TuningTrial, TuningStatus.
#pragma once

#include <optional>
#include <vector>

namespace weft::tuning {

// spec.tuning.bucketSize.
struct BucketTuningSpec {
  bool enabled = false;
  double min_mb = 1, max_mb = 256;
  int steps_per_trial = 20;
  int max_trials = 8;
  int confirm_rounds = 2;  // final-check rounds after the search (tuner/search.h, step 5)
};

// status.tuning: the tuner's record, absent until it starts.
enum class TuningState {
  Searching,  // trials are running; currentBucketMB is the size under trial
  Converged,  // chosenBucketMB is decided and written to the ConfigMap
  Stopped,    // tuning ended without a choice; the ranks keep currentBucketMB
};

// "Searching", "Converged", "Stopped": the values of status.tuning.state.
inline const char* tuning_state_name(TuningState s) {
  switch (s) {
    case TuningState::Searching: return "Searching";
    case TuningState::Converged: return "Converged";
    case TuningState::Stopped: return "Stopped";
  }
  return "Searching";
}

struct TuningTrial {
  double bucket_mb = 0;  // size tried, > 0
  long steps = 0;        // steps measured at this size so far
  // Set once the trial is complete (steps reached stepsPerTrial).
  std::optional<double> median_step_seconds;
  std::optional<double> exposed_comm_seconds;  // median exposed communication per step
  std::optional<double> score;                 // the tuner's score; lower is better

  bool operator==(const TuningTrial&) const = default;
};

struct TuningStatus {
  TuningState state = TuningState::Searching;
  double current_bucket_mb = 0;            // what the ConfigMap holds now, > 0
  std::optional<double> chosen_bucket_mb;  // set exactly when state is Converged
  std::vector<TuningTrial> trials;         // in the order they ran

  bool operator==(const TuningStatus&) const = default;
};

}  // namespace weft::tuning
