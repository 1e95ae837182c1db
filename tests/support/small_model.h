// The smallest Llama the parallel tests shard: two layers, GQA (2 query heads
// on 1 KV head), a handful of parameters per tensor so bucket and shard
// boundaries fall inside tensors.
#pragma once

#include "config/config.h"

namespace weft::testing {

inline ModelConfig small_model() {
  ModelConfig m;
  m.vocab_size = 32;
  m.d_model = 16;
  m.n_layers = 2;
  m.n_heads = 2;
  m.n_kv_heads = 1;
  m.ffn_hidden = 32;
  m.max_seq_len = 8;
  return m;
}

}  // namespace weft::testing
