// weft tensor: a non-owning view (data, dtype, shape, device) and the RAII
// buffers that own memory. Invariants: a Tensor never frees what it points to;
// shapes are row-major and contiguous; rank <= kMaxDims.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

namespace weft {

enum class DType : uint8_t { F32, BF16, I32, U16 };
enum class Device : uint8_t { CPU, CUDA };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* device_name(Device d);

// Aborts with file:line and a message when a kernel/allocation invariant breaks.
[[noreturn]] void fatal(const char* file, int line, const std::string& msg);
#define WEFT_CHECK(cond, msg)                                                        \
  do {                                                                               \
    if (!(cond)) ::weft::fatal(__FILE__, __LINE__, std::string("check failed: ") + \
                                                       #cond + ": " + (msg));       \
  } while (0)

struct Shape {
  static constexpr int kMaxDims = 5;
  std::array<int64_t, kMaxDims> d{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  int64_t operator[](int i) const { return d[i < 0 ? rank + i : i]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string str() const;
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  Device device = Device::CPU;
  Shape shape;

  Tensor() = default;
  Tensor(void* p, DType t, Shape s, Device dev = Device::CPU)
      : data(p), dtype(t), device(dev), shape(s) {}
  static Tensor f32(float* p, Shape s) { return Tensor(p, DType::F32, s); }
  static Tensor i32(int32_t* p, Shape s) { return Tensor(p, DType::I32, s); }

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape[i]; }
  int rank() const { return shape.rank; }

  float* f32() const;      // checks dtype
  int32_t* i32() const;    // checks dtype
  // Same memory, new shape with the same element count.
  Tensor view(Shape s) const;
  // Rows [begin, end) of the leading dimension.
  Tensor slice0(int64_t begin, int64_t end) const;
};

// Owns size bytes on a device, 64-byte aligned on the CPU. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, Device dev = Device::CPU);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  Tensor as(DType t, Shape s) const;  // checks that s fits in the buffer
  void zero();

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::CPU;
};

// The hook Buffer uses for CUDA memory (plain cudaMalloc/cudaFree until set;
// kernels/cuda/allocator.h installs the caching allocator through it). Returns
// false, changing nothing, if a CUDA Buffer exists: a block must be freed by
// the allocator that made it. Builds without CUDA have no CUDA memory: false.
bool set_cuda_buffer_allocator(void* (*alloc)(size_t), void (*free)(void*));

// A buffer that is also a tensor: convenience for activations and tests.
struct OwnedTensor {
  Buffer buf;
  Tensor t;
  OwnedTensor() = default;
  OwnedTensor(DType dt, Shape s, Device dev = Device::CPU);
  float* f32() const { return t.f32(); }
  int32_t* i32() const { return t.i32(); }
  int64_t numel() const { return t.numel(); }
  operator const Tensor&() const { return t; }
};

}  // namespace weft
