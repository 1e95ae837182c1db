// llm.c token shards as a TokenSource.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/token_source.h"

namespace weft {

// llm.c token shards (header of 256 int32: magic 20240520, version 1, token
// count; then uint16 tokens). `glob` may match several files. Throws DataError
// naming the file for a foreign, truncated or empty shard, or an empty glob.
// `field` names the glob's config field in errors.
std::unique_ptr<TokenSource> make_shard_source(const std::string& glob, uint64_t seed,
                                               const std::string& field = "data.shards");

}  // namespace weft
