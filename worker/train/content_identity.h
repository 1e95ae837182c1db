// What the files a config names hold, for the run fingerprint
// (comm/run_fingerprint.h). The fingerprint compares settings as written, so
// ranks that read `init_from` or `data.shards` through the same spelling may
// still read different bytes: a relative path resolves against each rank's
// working directory, and each node reads its own copy of a model. Each file
// the run will read becomes one more entry of the fingerprint, its size and
// a 64-bit hash of its content, so such ranks refuse to train together.
//
// The hash is sampled above ContentSampling::whole_file_bytes: a full hash
// would read the whole checkpoint on every rank at every start (seconds per
// GB, where ISP and ZeRO ranks read only their part), so a large file is
// hashed over its head (and the whole safetensors header: every tensor's
// name, dtype, shape and offsets), the first and last block of every tensor
// it lists, and strided_blocks blocks evenly spaced to its last byte. Two different models or datasets
// differ in all of these; an edit confined to the middle of one tensor, away
// from the strided blocks, goes unseen (docs/user-guide/worker-config.md has
// the measured cost and what it sees).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"

namespace weft {

struct ContentSampling {
  uint64_t whole_file_bytes = 2ull << 20;  // files up to this size are hashed whole
  uint64_t head_bytes = 64ull << 10;       // hashed from the start of every larger file
  uint64_t block_bytes = 4096;             // each sampled block
  int strided_blocks = 256;                // evenly spaced, the last ending at the file's last byte
};

// "<size> bytes, content <16 hex digits>", or "unreadable (<why>)": never
// throws, so a file no rank can read is refused later by its loader, as it
// was before, and one that only some ranks can read is a difference.
std::string file_identity(const std::string& path, const ContentSampling& sampling = {});

// The fingerprint entries for what cfg reads by name, in a fixed order: for
// init_from, ("init_from files", the files weft reads from it) and then
// ("init_from file <name>", file_identity) for config.json, the index and
// every weights file; the same for the files data.shards (and eval.shards)
// match when data.source is shards. A name's '%', '=' and newlines are
// %-escaped (the settings text is "path=value" lines).
std::vector<std::pair<std::string, std::string>> content_identity(const WorkerConfig& cfg,
                                                                  const ContentSampling& sampling = {});

}  // namespace weft
