// The parameter table: one entry per model tensor, in the flat layout of the
// parameter and gradient buffers. Strategies (parallel/) and the optimizer
// (optim/) see the model only through this table and the buffers.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace weft {

enum class ParamKind : uint8_t { Linear, Norm, Embedding };

// Layer ids of ParamInfo::layer besides the blocks 0..n_layers-1.
inline constexpr int kEmbeddingLayer = -1;  // model.embed_tokens
inline constexpr int kHeadLayer = -2;       // model.norm and lm_head

struct ParamInfo {
  std::string name;  // HF name, e.g. model.layers.3.self_attn.q_proj.weight
  Shape shape;
  int64_t offset = 0;  // elements from the start of the flat buffers
  int64_t numel = 0;
  ParamKind kind = ParamKind::Linear;
  int layer = 0;  // block index, kEmbeddingLayer or kHeadLayer
};

}  // namespace weft
