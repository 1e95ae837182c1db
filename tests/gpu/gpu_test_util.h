// Helpers for the CUDA-vs-CPU op tests: skip without a device, upload host
// data (seeded inputs: support/random.h) as f32 or bf16, download as f32,
// poison outputs (all-ones bytes: NaN in both f32 and bf16), and compare with
// dtype-aware tolerances.
//
// Tolerances (docs/cuda.md): inputs are rounded to bf16 once and the CPU
// reference runs in fp32 on exactly those values, so the only differences are
// accumulation order (fp32 on both sides) and the rounding of bf16 outputs
// (2^-9 relative). f32: rtol 1e-4, atol 1e-5 * max|ref|; bf16: rtol 1e-2,
// atol 1e-2 * max|ref|. Op-specific widening is stated at the call site.
#pragma once

#ifdef WEFT_HAVE_CUDA

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/context.h"
#include "support/random.h"
#include "tensor/tensor.h"

namespace weft::gpu_test {

using ::weft::testing::random_normal_f32;
using ::weft::testing::random_tokens;

// Skips the test with "no CUDA device: <reason>" when there is no GPU; else
// installs the caching allocator for Buffer (once).
#define WEFT_REQUIRE_GPU()                             \
  do {                                                 \
    std::string weft_why_;                             \
    if (::weft::cuda::device_count(&weft_why_) == 0)   \
      GTEST_SKIP() << "no CUDA device: " << weft_why_; \
    ::weft::cuda::install_buffer_allocator();          \
  } while (0)

// Rounds every value to bf16 (round to nearest even) when dt is BF16.
std::vector<float> round_to(DType dt, std::vector<float> x);

OwnedTensor cpu_tensor(const std::vector<float>& x, Shape s);
OwnedTensor cpu_ints(const std::vector<int32_t>& x, Shape s);
// A CUDA tensor of dtype dt (F32 or BF16) holding x (converted).
OwnedTensor gpu_tensor(const std::vector<float>& x, DType dt, Shape s);
OwnedTensor gpu_ints(const std::vector<int32_t>& x, Shape s);
OwnedTensor gpu_empty(DType dt, Shape s);
// Fills with 0xFF bytes (NaN) so an element a kernel forgets stays NaN.
void poison(const Tensor& t);
// Synchronises the device and copies back as f32.
std::vector<float> download(const Tensor& t);
std::vector<float> host_of(const Tensor& cpu_t);

// An attention shape: q [B, T, Hq, D], k and v [B, T, Hkv, D].
struct AttnShape {
  int64_t B, T, Hq, Hkv, D;
};
inline std::string str(const AttnShape& s) {
  return "B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " Hq" + std::to_string(s.Hq) + " Hkv" +
         std::to_string(s.Hkv) + " D" + std::to_string(s.D);
}

// Random attention inputs rounded to dt (q, k, v, dout from seeds seed..seed+3)
// and the CPU op's f32 results on them: forward (out, lse), then backward
// from the CPU out rounded to dt, as a GPU backward starts from its own out.
struct AttnCase {
  Shape qs, ks, ls;  // q and dout [B, T, Hq, D]; k and v [B, T, Hkv, D]; lse [B, Hq, T]
  std::vector<float> q, k, v, dout;
  OwnedTensor out, lse, dq, dk, dv;  // CPU, f32
};
// starts (packed documents, [B, T]): each query sees keys from its document's
// first position.
AttnCase cpu_attention_reference(const AttnShape& s, DType dt, uint64_t seed,
                                 const std::vector<int32_t>* starts = nullptr);

struct Tol {
  double rtol, atol_frac;
};
Tol tol_for(DType dt);
// Every element within atol + rtol |want|, atol = atol_frac * max(max|want|,
// scale); NaN anywhere in got fails. `scale` is the magnitude of the terms an
// output is computed from, for outputs that cancel to near zero (the result's
// own size would demand more than fp32 summation can give).
void expect_close(const std::string& what, const std::vector<float>& want,
                  const std::vector<float>& got, Tol tol, double scale = 0);

}  // namespace weft::gpu_test

#endif  // WEFT_HAVE_CUDA
