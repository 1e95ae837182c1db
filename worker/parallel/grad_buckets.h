// Gradient buckets: contiguous ranges of the flat fp32 gradient buffer.
//
// Invariants (docs/architecture/data-parallel.md):
//   - buckets cover the parameters in layout (= backward) order, each bucket a
//     contiguous run of whole parameters; a bucket closes once it holds at
//     least its cap (the first bucket may have a smaller cap, like DDP's 1 MB),
//     or where a separate last bucket begins;
//   - `padded_numel` rounds the bucket up to a multiple of the group size, so
//     the bucket splits into group-size equal shards (ZeRO). The padding is
//     virtual: the last shard is shorter in memory, so parameter offsets never
//     move when the cap changes;
//   - plan_buckets is a pure function: every rank computes the same layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/param_info.h"

namespace weft {

struct Bucket {
  int index = 0;
  int first_param = 0;  // params [first_param, last_param] in layout order
  int last_param = 0;
  int64_t begin = 0;    // element offsets in the flat buffers
  int64_t end = 0;
  int64_t padded_numel = 0;

  int64_t numel() const { return end - begin; }
  int num_params() const { return last_param - first_param + 1; }
  // Shard r of group_size: [begin + r*s, min(begin + (r+1)*s, end)), s = padded/group.
  int64_t shard_begin(int r, int group_size) const;
  int64_t shard_end(int r, int group_size) const;
};

// cap_mb / first_bucket_mb in MiB of fp32 gradients; first_bucket_mb 0 = cap.
// cap_mb must be resolved (> 0): see resolve_bucket_sizing for auto.
// last_bucket_mb > 0: the last bucket is the shortest run of trailing
// parameters holding at least that much (the bucket before it closes early).
std::vector<Bucket> plan_buckets(const std::vector<ParamInfo>& params, double cap_mb,
                                 double first_bucket_mb, int group_size, double last_bucket_mb = 0);

// parallel.bucket_cap_mb: auto (docs/architecture/data-parallel.md, "Bucket sizing"). A
// bucket's reduction starts once backward has produced all of its gradients,
// so the last bucket's can only start when backward ends: that one is exposed,
// while buckets that fill earlier run behind the rest of backward. Small
// buckets shrink that tail but each collective has a fixed cost (latency,
// CPU); the rule aims at kAutoBucketCount buckets per step, caps kept within
// [kAutoMinCapMb, kAutoMaxCapMb], plus a first bucket of kAutoFirstBucketMb
// (DDP's idea) so communication starts early in backward, and a last bucket
// of kAutoLastBucketMb so the exposed tail is as short as whole parameters
// allow (with lanes, the bucket before it still runs beside it).
//
// It reads only what every rank of a group holds identically (the gradient
// bytes of the group's layout and its size), so all ranks resolve the same
// cap without exchanging anything; and bucketing never changes the sums.
inline constexpr double kAutoBucketCount = 32;
inline constexpr double kAutoMinCapMb = 1;
inline constexpr double kAutoMaxCapMb = 25;
inline constexpr double kAutoFirstBucketMb = 1;
inline constexpr double kAutoLastBucketMb = 1;

struct BucketSizing {
  double cap_mb = 0;
  double first_bucket_mb = 0;  // 0 = cap_mb
  double last_bucket_mb = 0;   // 0 = whatever remains (the rule's only)
  bool automatic = false;      // chosen by the rule, not the config

  // A cap set later (the tuner's rebucket): the first bucket stays, a rule's
  // first bucket no larger than the new cap; a different cap is no longer auto.
  BucketSizing with_cap(double cap) const;
  // "cap 1.75 MiB, first bucket 1 MiB, last bucket from 1 MiB (auto: about 32 buckets, within 1..25 MiB)".
  std::string describe() const;
};

// The rule alone: sizes for grad_bytes of fp32 gradients over group_size ranks.
BucketSizing auto_bucket_sizing(int64_t grad_bytes, int group_size);

// The sizes to plan with: cap_mb > 0 (and first_bucket_mb) as configured;
// cap_mb 0 (auto) from the rule over params, where a first_bucket_mb > 0 still
// wins over the rule's first bucket.
BucketSizing resolve_bucket_sizing(const std::vector<ParamInfo>& params, double cap_mb,
                                   double first_bucket_mb, int group_size);

// "3 buckets: [0] 2 params 1.00 MiB, ..." for logs.
std::string describe_buckets(const std::vector<Bucket>& buckets);

}  // namespace weft
