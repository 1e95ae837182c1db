#include "parallel/grad_buckets.h"

#include <algorithm>
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
                                 double first_bucket_mb, int group_size) {
  WEFT_CHECK(cap_mb > 0, "bucket cap must be positive");
  WEFT_CHECK(group_size >= 1, "group size must be >= 1");
  const double mib = 1024.0 * 1024.0;
  const auto cap_elems = [&](size_t bucket) {
    double mb = (bucket == 0 && first_bucket_mb > 0) ? first_bucket_mb : cap_mb;
    return std::max<int64_t>(1, static_cast<int64_t>(mb * mib / sizeof(float)));
  };
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
    if (cur.numel() >= cap_elems(out.size()) || i + 1 == params.size()) {
      cur.padded_numel = (cur.numel() + group_size - 1) / group_size * group_size;
      out.push_back(cur);
      open = false;
    }
  }
  return out;
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
