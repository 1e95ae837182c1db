#include "parallel/grad_buckets.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "tensor/tensor.h"

namespace weft {

int64_t Bucket::shard_begin(int r, int group_size) const {
  return std::min(end, begin + r * (padded_numel / group_size));
}

int64_t Bucket::shard_end(int r, int group_size) const {
  return std::min(end, begin + (r + 1) * (padded_numel / group_size));
}

std::vector<Bucket> plan_buckets(const std::vector<ParamInfo>& params, double cap_mb,
                                 double first_bucket_mb, int group_size, double last_bucket_mb) {
  WEFT_CHECK(cap_mb > 0, "bucket cap must be positive");
  WEFT_CHECK(group_size >= 1, "group size must be >= 1");
  const double mib = 1024.0 * 1024.0;
  const auto cap_elems = [&](size_t bucket) {
    double mb = (bucket == 0 && first_bucket_mb > 0) ? first_bucket_mb : cap_mb;
    return std::max<int64_t>(1, static_cast<int64_t>(mb * mib / sizeof(float)));
  };
  // The last bucket starts at tail_begin (0: no separate last bucket).
  size_t tail_begin = 0;
  if (last_bucket_mb > 0 && !params.empty()) {
    const auto last_elems = static_cast<int64_t>(last_bucket_mb * mib / sizeof(float));
    int64_t held = 0;
    tail_begin = params.size();
    while (tail_begin > 0 && held < last_elems) held += params[--tail_begin].numel;
  }
  std::vector<Bucket> out;
  Bucket cur;
  bool open = false;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!open) {
      cur = Bucket{};
      cur.index = static_cast<int>(out.size());
      cur.first_param = static_cast<int>(i);
      cur.begin = params[i].offset;
      open = true;
    }
    cur.last_param = static_cast<int>(i);
    cur.end = params[i].offset + params[i].numel;
    if (cur.numel() >= cap_elems(out.size()) || i + 1 == params.size() || i + 1 == tail_begin) {
      cur.padded_numel = (cur.numel() + group_size - 1) / group_size * group_size;
      out.push_back(cur);
      open = false;
    }
  }
  return out;
}

BucketSizing auto_bucket_sizing(int64_t grad_bytes, int group_size) {
  WEFT_CHECK(grad_bytes >= 0, "gradient bytes must be >= 0");
  WEFT_CHECK(group_size >= 1, "group size must be >= 1");
  BucketSizing s;
  s.automatic = true;
  if (group_size == 1) {
    // Nothing crosses the wire: the fewest collectives are best.
    s.cap_mb = kAutoMaxCapMb;
    return s;
  }
  const double mib = 1024.0 * 1024.0;
  double cap = grad_bytes / mib / kAutoBucketCount;
  // Rounded up to 1/4 MiB: readable in logs, and the same on every rank.
  cap = std::ceil(cap * 4) / 4;
  s.cap_mb = std::clamp(cap, kAutoMinCapMb, kAutoMaxCapMb);
  s.first_bucket_mb = std::min(kAutoFirstBucketMb, s.cap_mb);
  s.last_bucket_mb = std::min(kAutoLastBucketMb, s.cap_mb);
  return s;
}

BucketSizing resolve_bucket_sizing(const std::vector<ParamInfo>& params, double cap_mb,
                                   double first_bucket_mb, int group_size) {
  WEFT_CHECK(cap_mb >= 0, "bucket cap must be positive or 0 (auto)");
  if (cap_mb > 0) return BucketSizing{cap_mb, first_bucket_mb, false};
  int64_t numel = 0;
  for (const ParamInfo& p : params) numel += p.numel;
  BucketSizing s = auto_bucket_sizing(numel * static_cast<int64_t>(sizeof(float)), group_size);
  if (first_bucket_mb > 0) s.first_bucket_mb = first_bucket_mb;
  return s;
}

BucketSizing BucketSizing::with_cap(double cap) const {
  BucketSizing s = *this;
  if (cap == cap_mb) return s;
  s.cap_mb = cap;
  if (automatic) {
    s.first_bucket_mb = std::min(first_bucket_mb, cap);
    s.last_bucket_mb = std::min(last_bucket_mb, cap);
  }
  s.automatic = false;
  return s;
}

std::string BucketSizing::describe() const {
  std::string s = fmt::format("cap {:.3g} MiB", cap_mb);
  if (first_bucket_mb > 0) s += fmt::format(", first bucket {:.3g} MiB", first_bucket_mb);
  if (last_bucket_mb > 0) s += fmt::format(", last bucket from {:.3g} MiB", last_bucket_mb);
  if (automatic) s += fmt::format(" (auto: about {:.0f} buckets, within {:.0f}..{:.0f} MiB)", kAutoBucketCount,
                                  kAutoMinCapMb, kAutoMaxCapMb);
  return s;
}

std::string describe_buckets(const std::vector<Bucket>& buckets) {
  std::ostringstream s;
  s << buckets.size() << " bucket" << (buckets.size() == 1 ? "" : "s") << ":";
  for (const Bucket& b : buckets) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " [%d] %d params %.2f MiB", b.index, b.num_params(),
                  b.numel() * 4.0 / (1024 * 1024));
    s << buf << (b.index + 1 < static_cast<int>(buckets.size()) ? "," : "");
  }
  return s.str();
}

}  // namespace weft
