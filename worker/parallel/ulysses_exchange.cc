#include "parallel/ulysses_exchange.h"

#include <string>

#include "kernels/ops.h"

namespace weft {

// to_heads: in [B, T, H, D] (T = S/n, this rank's positions) -> out [B, S, H/n, D].
// Chunk j of the send buffer is [B, T, H/n, D]: this rank's positions of head
// group j; chunk src of the receive buffer is rank src's positions of this
// rank's heads. to_sequence is the same exchange read the other way round.
// Packing and unpacking swap two leading dimensions of a 3-D view (rows of
// R elements; ops::swap_leading_dims), on whatever device the activations
// are, in their dtype; the compute stream waits for the exchange, which is
// timed as it sees it (ops::StreamWaits).
void UlyssesExchange::exchange(Tensor out, const Tensor& in, bool to_heads) {
  const int n = size();
  WEFT_CHECK(in.dtype == out.dtype && in.device == out.device && in.device == device_,
             "ISP all-to-all: tensors of one dtype on the model's device");
  const Tensor& seq = to_heads ? in : out;   // [B, T, H, D]
  const Tensor& head = to_heads ? out : in;  // [B, S, H/n, D]
  const int64_t B = seq.dim(0), T = seq.dim(1), H = seq.dim(2), D = seq.dim(3), Hn = H / n;
  WEFT_CHECK(head.dim(0) == B && head.dim(1) == T * n && head.dim(2) == Hn && head.dim(3) == D,
             "ISP all-to-all: shapes " + seq.shape.str() + " and " + head.shape.str() + " do not match sp " +
                 std::to_string(n));
  const size_t bytes = in.nbytes();
  if (send_.bytes() < bytes) {
    send_ = Buffer(bytes, in.device);
    recv_ = Buffer(bytes, in.device);
  }
  const Tensor send = send_.as(in.dtype, {in.numel()}), recv = recv_.as(in.dtype, {in.numel()});
  // Staged as [n chunks][B][T] rows of one position of one head group.
  if (to_heads)
    ops::swap_leading_dims(send, in, B * T, n);  // [B T, n, Hn D] -> [n, B T, Hn D]
  else
    ops::swap_leading_dims(send, in, B, n);  // [B, n, T Hn D] -> [n, B, T Hn D]
  waits_.time([&] {
    sp_->all_to_all(send, recv, {}, {}, to_heads ? "all_to_all heads" : "all_to_all sequence")->wait();
  });
  if (to_heads)
    ops::swap_leading_dims(out, recv, n, B);  // [n, B, T Hn D] -> [B, n, T Hn D]
  else
    ops::swap_leading_dims(out, recv, n, B * T);  // [n, B T, Hn D] -> [B T, n, Hn D]
}

}  // namespace weft
