// llm.c shard writer. The header and tokens are written in host order, which
// is little-endian on every platform weft builds for (asserted below).
#include "data/shard_writer.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <vector>

#include "data/token_source.h"

namespace weft {

static_assert(std::endian::native == std::endian::little, "llm.c shards are little-endian");

void write_shard(const std::string& path, std::span<const uint16_t> tokens) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw DataError(path + ": " + std::to_string(tokens.size()) +
                    " tokens do not fit the int32 count of an llm.c shard header");
  }
  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw DataError(path + ": cannot create shard (" + std::strerror(errno) + ")");
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size_bytes()));
  out.close();
  if (!out) throw DataError(path + ": write failed (" + std::strerror(errno) + ")");
}

void write_shard(const std::string& path, std::span<const int32_t> tokens) {
  std::vector<uint16_t> narrow(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > std::numeric_limits<uint16_t>::max()) {
      throw DataError(path + ": token " + std::to_string(tokens[i]) + " at position " +
                      std::to_string(i) + " does not fit uint16 (llm.c shards hold 0..65535)");
    }
    narrow[i] = static_cast<uint16_t>(tokens[i]);
  }
  write_shard(path, std::span<const uint16_t>(narrow));
}

void write_source_shard(const std::string& path, const TokenSource& source, int n_tokens) {
  if (n_tokens < 2) {
    throw DataError(path + ": a shard needs at least 2 tokens, asked for " +
                    std::to_string(n_tokens));
  }
  if (source.vocab_size() > 65536) {
    throw DataError(path + ": vocabulary of " + std::to_string(source.vocab_size()) +
                    " does not fit the uint16 tokens of an llm.c shard");
  }
  // One row of n_tokens - 1 positions holds n_tokens consecutive tokens.
  Batch row;
  source.fill(row, 1, n_tokens - 1, BatchIndex{});
  std::vector<int32_t> tokens(row.inputs);
  tokens.push_back(row.targets.back());
  write_shard(path, std::span<const int32_t>(tokens));
}

}  // namespace weft
