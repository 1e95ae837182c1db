// The batch every weft data source fills, where it sits in the global
// sample order, and the TokenSource interface. A TokenSource hands out
// micro-batches of (input, target) token rows; the batch for (step, micro,
// rank) is a pure function of the source's seed and those numbers, so a
// resumed run sees exactly the data the uninterrupted run would have seen,
// whatever was read before.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace weft {

struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Batch {
  int B = 0, T = 0;
  std::vector<int32_t> inputs;   // [B*T]
  std::vector<int32_t> targets;  // [B*T], targets[b,t] = inputs[b,t+1] of the stream
  // Packed documents (data.document_boundaries eos), else empty: [B*T], the
  // first position of (b, t)'s document in row b (mark_documents).
  std::vector<int32_t> doc_starts;
};

// Fills batch.doc_starts: each eos_token ends its document (it is the
// document's last token), the position after it starts the next; a row
// starts a document at 0 (the rest of one cut by the row boundary).
void mark_documents(Batch& batch, int eos_token);

// Where a batch comes from in the global sample order: rank r of world w takes
// sample rows [(step*accum + micro) * w * B + r * B, ... + B) of the stream, so
// N ranks with batch b see exactly the rows of 1 rank with batch N*b.
struct BatchIndex {
  int64_t step = 0;
  int micro = 0;
  int grad_accum = 1;
  int rank = 0;
  int world = 1;
};

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual void fill(Batch& batch, int B, int T, const BatchIndex& at) const = 0;
  virtual int vocab_size() const = 0;  // smallest vocabulary that covers the data
  // Nats per token a perfect model reaches; negative when unknown.
  virtual double entropy_floor() const { return -1; }
  virtual std::string describe() const = 0;
};

}  // namespace weft
