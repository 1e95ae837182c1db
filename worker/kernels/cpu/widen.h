// bf16 operands for the f32 CPU kernels: stored bf16, computed in f32.
// defines: cpu::WidenedOperands.
//
// ops.cc asks for one float pointer per operand: an f32 tensor's own data (no
// copy, so an all-f32 call costs nothing extra), or for a bf16 tensor an f32
// scratch copy. Inputs are widened exactly; outputs are rounded to bf16
// (nearest even) once, when the WidenedOperands is destroyed, after the kernel
// ran. Operands that are one bf16 view (same address and size: rmsnorm dx
// aliasing x, rope in place, cross-entropy dlogits aliasing logits) share one
// scratch copy, so the f32 kernel sees the same aliasing and the result equals
// the f32 kernel's on the widened values, rounded once: the definition CUDA
// computes. Other overlaps are as unsupported as they are in f32.
//
// Scratch comes from a per-thread pool of growable buffers (never shrunk; the
// largest is the [N, V] logits of the loss), so ops may run on several threads
// at once, and an op that calls another op gets fresh buffers.
#pragma once

#include <cstddef>
#include <vector>

#include "tensor/tensor.h"

namespace weft::cpu {

class WidenedOperands {
 public:
  WidenedOperands();
  ~WidenedOperands();  // rounds bf16 outputs into their tensors, frees the scratch
  WidenedOperands(const WidenedOperands&) = delete;
  WidenedOperands& operator=(const WidenedOperands&) = delete;

  // t is f32 or bf16 (ops.cc has checked).
  const float* in(const Tensor& t);  // read only
  float* out(const Tensor& t);       // overwritten: bf16 scratch starts undefined
  float* inout(const Tensor& t);     // read and written (accumulators, beta != 0)

 private:
  struct Entry {
    Tensor tensor;
    float* scratch;
    bool widened, written;
  };
  float* scratch_for(const Tensor& t, bool widen, bool write);

  size_t mark_;  // the pool's first slot owned by this object
  std::vector<Entry> entries_;
};

}  // namespace weft::cpu
