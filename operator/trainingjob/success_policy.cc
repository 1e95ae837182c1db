#include "trainingjob/success_policy.h"

namespace weft::tj {

bool gang_succeeded(const GangObservation& gang) {
  if (gang.replicas <= 0) return false;
  for (int r = 0; r < gang.replicas; ++r) {
    const RankState* s = gang.rank(r);
    if (!s || s->phase != "Succeeded") return false;
    if (s->exit_code && *s->exit_code != 0) return false;
  }
  return true;
}

}  // namespace weft::tj
