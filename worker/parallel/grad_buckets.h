// Gradient buckets: contiguous ranges of the flat fp32 gradient buffer.
//
// Invariants (docs/architecture.md, "Data parallelism"):
//   - buckets cover the parameters in layout (= backward) order, each bucket a
//     contiguous run of whole parameters; a bucket closes once it holds at
//     least its cap (the first bucket may have a smaller cap, like DDP's 1 MB);
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
std::vector<Bucket> plan_buckets(const std::vector<ParamInfo>& params, double cap_mb,
                                 double first_bucket_mb, int group_size);

// "3 buckets: [0] 2 params 1.00 MiB, ..." for logs.
std::string describe_buckets(const std::vector<Bucket>& buckets);

}  // namespace weft
