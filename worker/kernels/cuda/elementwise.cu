// Elementwise helpers and the grad-norm reduction. sum_squares is two-pass
// (fixed per-block partials in double, then one block sums them in order) so
// the grad norm is bit-identical run to run, unlike an atomicAdd reduction.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace weft::cuda {
namespace {

constexpr int kThreads = 256;

#define WEFT_GRID_STRIDE(i, n)                                              \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

template <typename T>
__global__ void fill_kernel(T* x, int64_t n, float value) {
  WEFT_GRID_STRIDE(i, n) store_f32(x, i, value);
}
__global__ void fill_i32_kernel(int32_t* x, int64_t n, int32_t value) {
  WEFT_GRID_STRIDE(i, n) x[i] = value;
}

template <typename Y, typename X>
__global__ void add_acc_kernel(Y* y, const X* x, int64_t n) {
  WEFT_GRID_STRIDE(i, n) store_f32(y, i, load_f32(y, i) + load_f32(x, i));
}

template <typename Y, typename X>
__global__ void cast_kernel(Y* y, const X* x, int64_t n) {
  WEFT_GRID_STRIDE(i, n) store_f32(y, i, load_f32(x, i));
}

template <typename T>
__global__ void scale_kernel(T* x, int64_t n, float s) {
  WEFT_GRID_STRIDE(i, n) store_f32(x, i, load_f32(x, i) * s);
}

// Pass 1: block b writes the double sum of its grid-stride share to part[b].
template <typename T>
__global__ void sum_squares_partial(const T* x, int64_t n, double* part) {
  __shared__ double warp_part[kThreads / 32];
  double acc = 0.0;
  WEFT_GRID_STRIDE(i, n) {
    const double v = load_f32(x, i);
    acc += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) warp_part[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) s += warp_part[w];
    part[blockIdx.x] = s;
  }
}

// Pass 2: one thread adds the partials in index order.
__global__ void sum_partials(const double* part, int count, double* out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double s = 0.0;
  for (int i = 0; i < count; ++i) s += part[i];
  *out = s;
}

}  // namespace

void fill(Tensor x, float value) {
  CudaContext& ctx = CudaContext::current();
  const int64_t n = x.numel();
  if (n == 0) return;
  if (x.dtype == DType::I32) {
    fill_i32_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.compute_stream()>>>(
        static_cast<int32_t*>(x.data), n, static_cast<int32_t>(value));
  } else {
    expect_float_dtype("fill", "x", x);
    dispatch_float(x.dtype, [&](auto t) {
      using T = decltype(t);
      fill_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, ctx.compute_stream()>>>(
          static_cast<T*>(x.data), n, value);
    });
  }
  CUDA_CHECK_LAUNCH();
}

void copy(Tensor dst, const Tensor& src) {
  if (src.nbytes() == 0 || dst.data == src.data) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice,
                             CudaContext::current().compute_stream()));
}

void swap_leading_dims(Tensor out, const Tensor& in, int64_t A, int64_t C) {
  if (in.numel() == 0) return;
  const size_t row = in.nbytes() / static_cast<size_t>(A * C);  // bytes of one [R] row
  const char* src = static_cast<const char*>(in.data);
  char* dst = static_cast<char*>(out.data);
  cudaStream_t stream = CudaContext::current().compute_stream();
  // The fewer of A or C copies, each a strided 2-D copy of the other's rows.
  if (A <= C) {
    for (int64_t a = 0; a < A; ++a)  // in[a, :, :] -> out[:, a, :]
      CUDA_CHECK(cudaMemcpy2DAsync(dst + a * row, A * row, src + a * C * row, row, row, C,
                                   cudaMemcpyDeviceToDevice, stream));
  } else {
    for (int64_t c = 0; c < C; ++c)  // in[:, c, :] -> out[c, :, :]
      CUDA_CHECK(cudaMemcpy2DAsync(dst + c * A * row, row, src + c * row, C * row, row, A,
                                   cudaMemcpyDeviceToDevice, stream));
  }
}

void transfer(Tensor dst, const Tensor& src) {
  if (src.nbytes() == 0) return;
  const cudaMemcpyKind kind =
      src.device == Device::CPU   ? cudaMemcpyHostToDevice
      : dst.device == Device::CPU ? cudaMemcpyDeviceToHost
                                  : cudaMemcpyDeviceToDevice;
  // Pageable host memory: the async copy may return before the host side is
  // read (H2D) or written (D2H), so both wait for the stream. Callers move
  // whole tensors at step boundaries, where the wait costs nothing extra.
  cudaStream_t stream = CudaContext::current().compute_stream();
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), kind, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

void add_acc(Tensor y_acc, const Tensor& x) {
  expect_float_dtype("add_acc", "y_acc", y_acc);
  expect_float_dtype("add_acc", "x", x);
  CudaContext& ctx = CudaContext::current();
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(y_acc.dtype, [&](auto ty) {
    using Y = decltype(ty);
    dispatch_float(x.dtype, [&](auto tx) {
      using X = decltype(tx);
      add_acc_kernel<Y, X><<<blocks_for(n, kThreads), kThreads, 0, ctx.compute_stream()>>>(
          static_cast<Y*>(y_acc.data), static_cast<const X*>(x.data), n);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void cast(Tensor dst, const Tensor& src) {
  expect_float_dtype("cast", "dst", dst);
  expect_float_dtype("cast", "src", src);
  CudaContext& ctx = CudaContext::current();
  const int64_t n = src.numel();
  if (n == 0) return;
  dispatch_float(dst.dtype, [&](auto ty) {
    using Y = decltype(ty);
    dispatch_float(src.dtype, [&](auto tx) {
      using X = decltype(tx);
      cast_kernel<Y, X><<<blocks_for(n, kThreads), kThreads, 0, ctx.compute_stream()>>>(
          static_cast<Y*>(dst.data), static_cast<const X*>(src.data), n);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void scale(Tensor x, float s) {
  expect_float_dtype("scale", "x", x);
  CudaContext& ctx = CudaContext::current();
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    scale_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, ctx.compute_stream()>>>(
        static_cast<T*>(x.data), n, s);
  });
  CUDA_CHECK_LAUNCH();
}

double sum_squares(const Tensor& x) {
  expect_float_dtype("sum_squares", "x", x);
  CudaContext& ctx = CudaContext::current();
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  int64_t want = (n + kThreads - 1) / kThreads;
  const int blocks =
      static_cast<int>(want < CudaContext::kReduceSlots ? want : CudaContext::kReduceSlots);
  double* part = ctx.reduce_scratch();
  dispatch_float(x.dtype, [&](auto t) {
    using T = decltype(t);
    sum_squares_partial<T>
        <<<blocks, kThreads, 0, ctx.compute_stream()>>>(static_cast<const T*>(x.data), n, part);
  });
  CUDA_CHECK_LAUNCH();
  sum_partials<<<1, 32, 0, ctx.compute_stream()>>>(part, blocks, ctx.host_result());
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaStreamSynchronize(ctx.compute_stream()));
  return *ctx.host_result();
}

}  // namespace weft::cuda
