// RoPE, rotate_half convention. A warp-row of threads per (row, head), each
// thread a pair j < D/2: it reads both elements of its pair before writing
// either, so out may alias x.
// The angles p * theta^(-2j/D) are formed and reduced in double on the host,
// exactly as the CPU kernel forms them (in fp32, p ~ 4096 would leave only
// ~1e-3 rad of angle precision), rounded to f32 cos/sin once, and kept on the
// device per (theta, D), grown as longer positions are asked for. Forming them
// on the device for every element instead (double pow and sincos per element)
// cost about 10x the memory time of the op on an H100.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace weft::cuda {
namespace {

struct RopeTable {
  float2* cos_sin = nullptr;  // [positions, D/2] of (cos, sin)
  int64_t positions = 0;
};

// The table for positions [0, positions) of (theta, D) on the current device.
const float2* rope_table(CudaContext& ctx, float theta, int64_t D, int64_t positions) {
  // Per thread (each thread drives one device's stream), kept for the process.
  thread_local auto* tables = new std::map<std::tuple<int, float, int64_t>, RopeTable>();
  RopeTable& t = (*tables)[{ctx.device(), theta, D}];
  if (t.positions >= positions) return t.cos_sin;
  const int64_t half = D / 2;
  const int64_t cap = std::max<int64_t>({positions, 2 * t.positions, 1024});
  std::vector<float2> host(static_cast<size_t>(cap * half));
  for (int64_t j = 0; j < half; ++j) {
    const double inv_freq =
        std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(j) / static_cast<double>(D));
    for (int64_t p = 0; p < cap; ++p) {
      const double a = static_cast<double>(p) * inv_freq;
      host[p * half + j] = make_float2(static_cast<float>(std::cos(a)), static_cast<float>(std::sin(a)));
    }
  }
  auto* dev = static_cast<float2*>(device_alloc(host.size() * sizeof(float2)));
  CUDA_CHECK(cudaMemcpyAsync(dev, host.data(), host.size() * sizeof(float2), cudaMemcpyHostToDevice,
                             ctx.compute_stream()));
  // The host table dies here, and the old table may still be read by queued kernels.
  CUDA_CHECK(cudaStreamSynchronize(ctx.compute_stream()));
  if (t.cos_sin) device_free(t.cos_sin);
  t = {dev, cap};
  return t.cos_sin;
}

constexpr int kPairThreads = 32, kRowsPerBlock = 8;

template <typename T>
__global__ void rope_kernel(T* out, const T* x, const float2* table, int64_t rows, int64_t Tn,
                            int64_t H, int64_t half, int64_t pos0, float sign) {
  for (int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.y; row < rows;
       row += int64_t{gridDim.x} * kRowsPerBlock) {  // row = (b * T + t) * H + h
    const float2* cs = table + (pos0 + (row / H) % Tn) * half;
    const int64_t off = row * 2 * half;
    for (int64_t j = threadIdx.x; j < half; j += kPairThreads) {
      const float2 e = cs[j];
      const float c = e.x, s = sign * e.y;
      const float lo = load_f32(x, off + j), hi = load_f32(x, off + j + half);
      store_f32(out, off + j, lo * c - hi * s);
      store_f32(out, off + j + half, hi * c + lo * s);
    }
  }
}

void rope(const char* op, Tensor out, const Tensor& x, float theta, int64_t pos0, float sign) {
  expect_float_dtype(op, "input", x);
  expect_same_dtype(op, "output", out, x, "input");
  const int64_t B = x.dim(0), Tn = x.dim(1), H = x.dim(2), D = x.dim(3);
  const int64_t rows = B * Tn * H;
  if (rows == 0 || D == 0) return;
  CudaContext& ctx = CudaContext::current();
  const float2* table = rope_table(ctx, theta, D, pos0 + Tn);
  const dim3 block(kPairThreads, kRowsPerBlock);
  const unsigned grid = blocks_for(rows, kRowsPerBlock);
  dispatch_float(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<grid, block, 0, ctx.compute_stream()>>>(
        static_cast<T*>(out.data), static_cast<const T*>(x.data), table, rows, Tn, H, D / 2, pos0,
        sign);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(Tensor out, const Tensor& x, float theta, int64_t pos0) {
  rope("rope_forward", out, x, theta, pos0, 1.0f);
}

void rope_backward(Tensor dx, const Tensor& dout, float theta, int64_t pos0) {
  rope("rope_backward", dx, dout, theta, pos0, -1.0f);
}

}  // namespace weft::cuda
