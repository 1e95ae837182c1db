// SequenceExchange: the seam through which the model's attention runs on a
// sequence split over several ranks (ISP's Ulysses all-to-all). The model
// holds S/n positions of every sequence (its slice is the `rank`-th); attention
// needs every position of a subset of the heads. The strategy that owns the
// communicator implements it; the model sees only this interface.
//
// Invariants: n = size() divides the query and the key/value head counts; a
// rank's heads after to_heads are the `rank`-th n-th of each (so a query head
// and its grouped KV head land on the same rank); every rank of the group calls
// the two methods in the same order (they are collectives).
#pragma once

#include "tensor/tensor.h"

namespace weft {

class SequenceExchange {
 public:
  virtual ~SequenceExchange() = default;
  virtual int size() const = 0;  // ranks sharing one sequence
  virtual int rank() const = 0;  // this rank's slice, 0-based
  // in [B, S/n, H, D] (this rank's positions, every head) ->
  // out [B, S, H/n, D] (every position, this rank's heads).
  virtual void to_heads(Tensor out, const Tensor& in) = 0;
  // The inverse: in [B, S, H/n, D] -> out [B, S/n, H, D].
  virtual void to_sequence(Tensor out, const Tensor& in) = 0;
};

}  // namespace weft
