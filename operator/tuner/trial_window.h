// One trial's measurement window, fed with rounds of scrapes of every rank.
// Pure (no I/O): the tuner scrapes, this decides what counts.
// defines: RankSample, read_rank_sample, reports_cap, TrialWindow.
//
// The window opens at the first round in which every rank reports the
// trial's cap in weft_bucket_cap_bytes, so the steps before the switch, and
// the switch step itself, are never scored. From then on each pair of
// consecutive rounds gives one interval sample per rank: the mean step time
// over the steps it finished in that interval (weft_step_seconds sum / count)
// and likewise the exposed communication per step; the interval's sample is
// the mean over ranks. The trial's numbers are the medians of those samples,
// so one slow interval (a checkpoint, a noisy neighbour) does not decide it.
// A counter that goes backwards (a restarted rank) or a rank that leaves the
// cap closes the window; it reopens from scratch.
#pragma once

#include <optional>
#include <vector>

#include "scrape/prom_text.h"

namespace weft::tuner {

// One rank's cumulative numbers from one scrape.
struct RankSample {
  double step = 0;                // weft_step
  double cap_bytes = 0;           // weft_bucket_cap_bytes
  double step_seconds_sum = 0;    // weft_step_seconds_sum
  double step_seconds_count = 0;  // weft_step_seconds_count
  double exposed_seconds = 0;     // weft_exposed_comm_seconds_total, all groups (0 when absent)
};

// nullopt when a family the tuner needs is missing (e.g. before the first
// step, or not a weft-worker).
std::optional<RankSample> read_rank_sample(const scrape::Exposition& e);

// Whether `cap_bytes` is `mb` MiB as a worker reports it: the cap travels
// between ranks as a float and is truncated to bytes.
bool reports_cap(double cap_bytes, double mb);

class TrialWindow {
 public:
  TrialWindow(double bucket_mb, int ranks) : bucket_mb_(bucket_mb), ranks_(ranks) {}

  // One round: samples[r] is rank r's scrape. A round with the wrong number
  // of ranks is ignored.
  void add(const std::vector<RankSample>& samples);

  double bucket_mb() const { return bucket_mb_; }
  bool open() const { return !base_.empty(); }
  // Steps every rank finished since the window opened.
  long steps() const;
  int intervals() const { return static_cast<int>(step_seconds_.size()); }
  std::optional<double> median_step_seconds() const;
  std::optional<double> median_exposed_seconds() const;

 private:
  double bucket_mb_;
  int ranks_;
  std::vector<RankSample> base_, last_;  // empty while closed
  std::vector<double> step_seconds_, exposed_seconds_;
};

double median(std::vector<double> v);  // of a non-empty vector

}  // namespace weft::tuner
