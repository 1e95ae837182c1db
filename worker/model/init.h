// Deterministic parameter initialisation: a pure function of (seed, tensor
// name), independent of the standard library's distributions, so a checkpoint
// made on one machine is reproduced on another.
#pragma once

#include <cstdint>
#include <string>

namespace weft {

uint64_t splitmix64(uint64_t& state);
uint64_t hash_name(const std::string& name);  // FNV-1a 64
// w[i] ~ Normal(0, std) from the stream (seed, stream).
void fill_normal(float* w, int64_t n, float std, uint64_t seed, uint64_t stream);

}  // namespace weft
