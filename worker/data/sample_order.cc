// The sample order every source shares, and the batch's shape and documents.
#include "data/sample_order.h"

#include <string>

#include "data/token_source.h"

namespace weft {

void mark_documents(Batch& batch, int eos_token) {
  const size_t T = static_cast<size_t>(batch.T);
  batch.doc_starts.resize(batch.inputs.size());
  for (size_t row = 0; row + T <= batch.inputs.size(); row += T) {
    int32_t start = 0;
    for (size_t t = 0; t < T; ++t) {
      batch.doc_starts[row + t] = start;
      if (batch.inputs[row + t] == eos_token) start = static_cast<int32_t>(t + 1);
    }
  }
}

int64_t first_sample_row(const BatchIndex& at, int B) {
  if (at.world < 1 || at.rank < 0 || at.rank >= at.world || at.grad_accum < 1 || at.micro < 0 ||
      at.micro >= at.grad_accum || at.step < 0) {
    throw DataError("batch index out of range: step " + std::to_string(at.step) + ", micro " +
                    std::to_string(at.micro) + " of grad_accum " + std::to_string(at.grad_accum) +
                    ", rank " + std::to_string(at.rank) + " of world " +
                    std::to_string(at.world));
  }
  return ((at.step * at.grad_accum + at.micro) * at.world + at.rank) * int64_t{B};
}

void shape_batch(Batch& batch, int B, int T) {
  if (B < 1 || T < 1) {
    throw DataError("batch shape must be positive, got B=" + std::to_string(B) +
                    " T=" + std::to_string(T));
  }
  batch.B = B;
  batch.T = T;
  batch.inputs.resize(static_cast<size_t>(B) * T);
  batch.targets.resize(static_cast<size_t>(B) * T);
}

}  // namespace weft
