// CPU SwiGLU gate. defines: cpu::swiglu_forward, cpu::swiglu_backward.
// All operands hold n elements ([N, F] flattened). silu(g) = g * sigmoid(g).
// Instantiated for float and double (swiglu.cc).
#pragma once

#include <cstdint>

namespace weft::cpu {

// out = silu(gate) * up (overwritten); out may alias gate or up.
template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n);

// dgate = dout * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))), dup = dout * silu(g);
// both overwritten. Either output may alias dout.
template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n);

}  // namespace weft::cpu
