#include "kernels/cpu/widen.h"

#include <deque>

#include "kernels/cpu/elementwise.h"

namespace weft::cpu {
namespace {

// Slots [0, top) are held by live WidenedOperands of this thread, innermost
// last. A deque keeps each slot's address when more are added; a slot keeps
// its capacity for the next call.
struct Pool {
  std::deque<std::vector<float>> slots;
  size_t top = 0;
};
thread_local Pool pool;

float* take_slot(int64_t n) {
  if (pool.top == pool.slots.size()) pool.slots.emplace_back();
  std::vector<float>& s = pool.slots[pool.top++];
  if (s.size() < static_cast<size_t>(n)) s.resize(static_cast<size_t>(n));
  return s.data();
}

}  // namespace

WidenedOperands::WidenedOperands() : mark_(pool.top) {}

WidenedOperands::~WidenedOperands() {
  for (const Entry& e : entries_)
    if (e.written)
      cast_to_bf16(static_cast<uint16_t*>(e.tensor.data), e.scratch, e.tensor.numel());
  pool.top = mark_;
}

float* WidenedOperands::scratch_for(const Tensor& t, bool widen, bool write) {
  Entry* e = nullptr;
  for (Entry& x : entries_)
    if (x.tensor.data == t.data && x.tensor.numel() == t.numel()) e = &x;
  if (e == nullptr) {
    entries_.push_back(Entry{t, take_slot(t.numel()), false, false});
    e = &entries_.back();
  }
  if (widen && !e->widened) {
    cast_from_bf16(e->scratch, static_cast<const uint16_t*>(t.data), t.numel());
    e->widened = true;
  }
  e->written |= write;
  return e->scratch;
}

const float* WidenedOperands::in(const Tensor& t) {
  return t.dtype == DType::F32 ? t.f32() : scratch_for(t, true, false);
}

float* WidenedOperands::out(const Tensor& t) {
  return t.dtype == DType::F32 ? t.f32() : scratch_for(t, false, true);
}

float* WidenedOperands::inout(const Tensor& t) {
  return t.dtype == DType::F32 ? t.f32() : scratch_for(t, true, true);
}

}  // namespace weft::cpu
