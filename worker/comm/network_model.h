// NetworkModel: the network emulator behind comm.simulate. A collective on a
// group of p ranks is modelled as the messages a ring (all-reduce: 2(p-1)
// messages of B/p; reduce-scatter, all-gather, all-to-all: p-1 of B/p) or a
// tree (broadcast: ceil(log2 p) of B; barrier: 2 ceil(log2 p) empty ones)
// would send, each costing latency + bytes / bandwidth, in sequence. The Gloo
// communicator sleeps that long on its comm thread after running the real
// collective, so comm time follows the modelled network while compute keeps
// overlapping it. An emulator for experiments (which bucket size wins on a
// slow network), not a simulator: no contention, no topology, no jitter.
#pragma once

#include <chrono>
#include <cstdint>

#include "comm/communicator.h"

namespace weft::comm {

struct NetworkModel {
  double latency_s = 0;         // per message
  double bytes_per_second = 0;  // per link; 0 = unlimited

  bool on() const { return latency_s > 0 || bytes_per_second > 0; }
  // The modelled time of one collective; `bytes` is what this rank passes
  // in (the op's input buffer), `group_size` the ranks in the group.
  std::chrono::nanoseconds delay(OpKind op, uint64_t bytes, int group_size) const;
};

}  // namespace weft::comm
