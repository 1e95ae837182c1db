// CPU elementwise helpers over n contiguous elements.
// defines: cpu::fill, cpu::copy, cpu::add_acc, cpu::scale, cpu::sum_squares,
// cpu::cast_to_bf16, cpu::cast_from_bf16.
// Instantiated for float and double (elementwise.cc).
#pragma once

#include <cstdint>

namespace weft::cpu {

// Also instantiated for uint16_t (bf16 bits) and int32_t.
template <typename T>
void fill(T* x, int64_t n, T value);
// dst == src allowed; other overlap is not. Also instantiated for unsigned
// char: ops::copy moves raw bytes of any dtype.
template <typename T>
void copy(T* dst, const T* src, int64_t n);
template <typename T>
void add_acc(T* y, const T* x, int64_t n);  // y += x
template <typename T>
void scale(T* x, int64_t n, T s);  // x *= s

// sum of x^2 accumulated in double. Deterministic: fixed-size chunks are
// summed in parallel, then the chunk partials in order, so the result does not
// depend on the thread count (the gradient norm must be reproducible on resume).
template <typename T>
double sum_squares(const T* x, int64_t n);

// bf16 is stored as its 16 raw bits; rounding is tensor/bf16.h's (nearest even).
void cast_to_bf16(uint16_t* dst, const float* src, int64_t n);
void cast_from_bf16(float* dst, const uint16_t* src, int64_t n);

}  // namespace weft::cpu
