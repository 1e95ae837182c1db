#include "tensor/tensor.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#ifdef WEFT_HAVE_CUDA
#include <atomic>

#include <cuda_runtime.h>
#endif

namespace weft {

#ifdef WEFT_HAVE_CUDA
namespace {
// The CUDA allocator hook (kernels/cuda/allocator.h installs the caching
// allocator). Plain cudaMalloc until then. It may only change while no CUDA
// Buffer is alive, so a block is always freed by the allocator that made it.
void* (*g_cuda_alloc)(size_t) = nullptr;
void (*g_cuda_free)(void*) = nullptr;
std::atomic<int64_t> g_live_cuda_buffers{0};
}  // namespace

bool set_cuda_buffer_allocator(void* (*alloc)(size_t), void (*free)(void*)) {
  if (g_live_cuda_buffers.load() != 0) return false;
  g_cuda_alloc = alloc;
  g_cuda_free = free;
  return true;
}
#else
bool set_cuda_buffer_allocator(void* (*)(size_t), void (*)(void*)) { return false; }
#endif

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::U16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::U16: return "u16";
  }
  return "?";
}

const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

void fatal(const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "weft: fatal: %s (%s:%d)\n", msg.c_str(), file, line);
  std::fflush(stderr);
  std::abort();
}

Shape::Shape(std::initializer_list<int64_t> dims) {
  WEFT_CHECK(dims.size() <= kMaxDims, "too many dimensions");
  for (int64_t v : dims) d[rank++] = v;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= d[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (d[i] != o.d[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::ostringstream s;
  s << "[";
  for (int i = 0; i < rank; ++i) s << (i ? ", " : "") << d[i];
  s << "]";
  return s.str();
}

float* Tensor::f32() const {
  WEFT_CHECK(dtype == DType::F32, std::string("expected f32 tensor, got ") + dtype_name(dtype));
  return static_cast<float*>(data);
}

int32_t* Tensor::i32() const {
  WEFT_CHECK(dtype == DType::I32, std::string("expected i32 tensor, got ") + dtype_name(dtype));
  return static_cast<int32_t*>(data);
}

Tensor Tensor::view(Shape s) const {
  WEFT_CHECK(s.numel() == numel(), "view " + s.str() + " of " + shape.str());
  Tensor t = *this;
  t.shape = s;
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  WEFT_CHECK(rank() >= 1 && begin >= 0 && begin <= end && end <= dim(0),
             "slice0 out of range for " + shape.str());
  int64_t row = dim(0) ? numel() / dim(0) : 0;
  Tensor t = *this;
  t.data = static_cast<char*>(data) + static_cast<size_t>(begin * row) * dtype_size(dtype);
  t.shape.d[0] = end - begin;
  return t;
}

Buffer::Buffer(size_t bytes, Device dev) : bytes_(bytes), device_(dev) {
  if (bytes == 0) return;
  if (dev == Device::CPU) {
    size_t rounded = (bytes + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded);
    WEFT_CHECK(data_ != nullptr, "out of host memory allocating " + std::to_string(bytes) + " bytes");
    std::memset(data_, 0, rounded);
  } else {
#ifdef WEFT_HAVE_CUDA
    if (g_cuda_alloc) {
      data_ = g_cuda_alloc(bytes);
    } else {
      cudaError_t e = cudaMalloc(&data_, bytes);
      WEFT_CHECK(e == cudaSuccess, std::string("cudaMalloc: ") + cudaGetErrorString(e));
    }
    ++g_live_cuda_buffers;
    const cudaError_t e = cudaMemset(data_, 0, bytes);
    WEFT_CHECK(e == cudaSuccess, std::string("cudaMemset of a new buffer: ") + cudaGetErrorString(e));
#else
    fatal(__FILE__, __LINE__, "CUDA buffer requested but weft was built without CUDA");
#endif
  }
}

void Buffer::release() {
  if (!data_) return;
  if (device_ == Device::CPU) {
    std::free(data_);
  } else {
#ifdef WEFT_HAVE_CUDA
    if (g_cuda_free)
      g_cuda_free(data_);
    else
      cudaFree(data_);
    --g_live_cuda_buffers;
#endif
  }
  data_ = nullptr;
  bytes_ = 0;
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_), device_(o.device_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Tensor Buffer::as(DType t, Shape s) const {
  WEFT_CHECK(static_cast<size_t>(s.numel()) * dtype_size(t) <= bytes_,
             "shape " + s.str() + " does not fit in buffer of " + std::to_string(bytes_) + " bytes");
  return Tensor(data_, t, s, device_);
}

void Buffer::zero() {
  if (!data_) return;
  if (device_ == Device::CPU) {
    std::memset(data_, 0, bytes_);
  } else {
#ifdef WEFT_HAVE_CUDA
    const cudaError_t e = cudaMemset(data_, 0, bytes_);
    WEFT_CHECK(e == cudaSuccess, std::string("cudaMemset: ") + cudaGetErrorString(e));
#endif
  }
}

OwnedTensor::OwnedTensor(DType dt, Shape s, Device dev)
    : buf(static_cast<size_t>(s.numel()) * dtype_size(dt), dev), t(buf.as(dt, s)) {}

}  // namespace weft
