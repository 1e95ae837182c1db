// Shared by the CLI tests: a model small enough for a step in milliseconds,
// and an llm.c shard of a fixed token pattern (data/shard_writer.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "data/shard_writer.h"

namespace weft::cli_test {

// Four lines of worker config: a 32-token vocabulary, 2 layers, 16 positions.
inline constexpr const char* kSmallModel =
    "model: {vocab_size: 32, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, max_seq_len: 16}\n"
    "train: {seq_len: 16, micro_batch: 2, log_every: 1}\n"
    "data: {branching: 3}\n"
    "metrics: {port: 0}\n";

// `count` tokens, token i = (7 i + i / 3) mod vocab.
inline void write_pattern_shard(const std::filesystem::path& p, int64_t count, int vocab) {
  std::vector<uint16_t> tokens(count);
  for (int64_t i = 0; i < count; ++i) tokens[i] = static_cast<uint16_t>((i * 7 + i / 3) % vocab);
  weft::write_shard(p.string(), tokens);
}

}  // namespace weft::cli_test
