// Writes token shards in llm.c's format (the format make_shard_source reads):
// a header of 256 little-endian int32 (magic 20240520, version 1, token count,
// the rest zero) followed by the tokens as little-endian uint16.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace weft {

class TokenSource;

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;

// Throws DataError naming the file when it cannot be written, or naming the
// first token outside [0, 65535] (before anything is written).
void write_shard(const std::string& path, std::span<const int32_t> tokens);
void write_shard(const std::string& path, std::span<const uint16_t> tokens);

// Writes the first `n_tokens` tokens of `source`'s stream (row 0 of step 0,
// read as one long row) as a shard: turns the synthetic Markov source into a
// file for the shard path of the trainer. Throws DataError for n_tokens < 2 or
// a source whose vocabulary does not fit uint16.
void write_source_shard(const std::string& path, const TokenSource& source, int n_tokens);

}  // namespace weft
