// UlyssesExchange: ISP's sequence exchange (the model's SequenceExchange
// over the sp group): the all-to-all around attention that turns this rank's
// positions of every head into every position of this rank's heads and back
// (DeepSpeed-Ulysses). Packing and unpacking run on the activations' device
// in their dtype; the compute stream waits for the exchange, timed as it sees
// it (all of an all-to-all is exposed).
// Invariants: every rank of the sp group calls it in the same order (the
// model's); sp divides the head count of every tensor it moves (the config
// checks the query heads; the model replicates KV heads when there are fewer
// than sp).
#pragma once

#include "comm/communicator.h"
#include "kernels/stream_timer.h"
#include "model/sequence_exchange.h"
#include "tensor/tensor.h"

namespace weft {

class UlyssesExchange : public SequenceExchange {
 public:
  // `sp` may be null (one rank: nothing to exchange); `device` is the model's.
  UlyssesExchange(comm::CommunicatorPtr sp, Device device) : sp_(std::move(sp)), device_(device), waits_(device) {}

  int size() const override { return sp_ ? sp_->size() : 1; }
  int rank() const override { return sp_ ? sp_->rank() : 0; }
  void to_heads(Tensor out, const Tensor& in) override { exchange(out, in, true); }
  void to_sequence(Tensor out, const Tensor& in) override { exchange(out, in, false); }

  // Seconds compute waited for the exchanges since the last call (on a GPU
  // this waits for the events of the step's exchanges).
  double take_wait_seconds() { return waits_.take_seconds(); }

 private:
  void exchange(Tensor out, const Tensor& in, bool to_heads);

  comm::CommunicatorPtr sp_;
  Device device_;
  ops::StreamWaits waits_;
  Buffer send_, recv_;  // staging, on the model's device, grown to the largest exchange
};

}  // namespace weft
