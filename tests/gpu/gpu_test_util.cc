#include "gpu/gpu_test_util.h"

#ifdef WEFT_HAVE_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ops.h"
#include "tensor/bf16.h"

namespace weft::gpu_test {

namespace {
void check(cudaError_t e, const char* what) {
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}
}  // namespace

std::vector<float> round_to(DType dt, std::vector<float> x) {
  if (dt == DType::BF16)
    for (float& v : x) v = bf16_to_f32(f32_to_bf16(v));
  return x;
}

OwnedTensor cpu_tensor(const std::vector<float>& x, Shape s) {
  OwnedTensor t(DType::F32, s);
  EXPECT_EQ(static_cast<size_t>(s.numel()), x.size());
  std::memcpy(t.t.data, x.data(), x.size() * sizeof(float));
  return t;
}

OwnedTensor cpu_ints(const std::vector<int32_t>& x, Shape s) {
  OwnedTensor t(DType::I32, s);
  std::memcpy(t.t.data, x.data(), x.size() * sizeof(int32_t));
  return t;
}

OwnedTensor gpu_tensor(const std::vector<float>& x, DType dt, Shape s) {
  OwnedTensor t(dt, s, Device::CUDA);
  EXPECT_EQ(static_cast<size_t>(s.numel()), x.size());
  if (dt == DType::BF16) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = f32_to_bf16(x[i]);
    check(cudaMemcpy(t.t.data, h.data(), h.size() * 2, cudaMemcpyHostToDevice), "upload bf16");
  } else {
    check(cudaMemcpy(t.t.data, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload f32");
  }
  return t;
}

OwnedTensor gpu_ints(const std::vector<int32_t>& x, Shape s) {
  OwnedTensor t(DType::I32, s, Device::CUDA);
  check(cudaMemcpy(t.t.data, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload i32");
  return t;
}

OwnedTensor gpu_empty(DType dt, Shape s) {
  OwnedTensor t(dt, s, Device::CUDA);
  poison(t.t);
  return t;
}

void poison(const Tensor& t) {
  check(cudaDeviceSynchronize(), "poison: sync");
  check(cudaMemset(t.data, 0xff, t.nbytes()), "poison");
  check(cudaDeviceSynchronize(), "poison: sync");
}

std::vector<float> download(const Tensor& t) {
  check(cudaDeviceSynchronize(), "download: sync (a kernel failed)");
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::BF16) {
    std::vector<uint16_t> h(out.size());
    check(cudaMemcpy(h.data(), t.data, h.size() * 2, cudaMemcpyDeviceToHost), "download bf16");
    for (size_t i = 0; i < h.size(); ++i) out[i] = bf16_to_f32(h[i]);
  } else {
    EXPECT_EQ(t.dtype, DType::F32);
    check(cudaMemcpy(out.data(), t.data, out.size() * 4, cudaMemcpyDeviceToHost), "download f32");
  }
  return out;
}

std::vector<float> host_of(const Tensor& cpu_t) {
  const float* p = cpu_t.f32();
  return std::vector<float>(p, p + cpu_t.numel());
}

AttnCase cpu_attention_reference(const AttnShape& s, DType dt, uint64_t seed, const std::vector<int32_t>* starts) {
  AttnCase c;
  c.qs = Shape{s.B, s.T, s.Hq, s.D};
  c.ks = Shape{s.B, s.T, s.Hkv, s.D};
  c.ls = Shape{s.B, s.Hq, s.T};
  c.q = round_to(dt, random_normal_f32(c.qs.numel(), seed));
  c.k = round_to(dt, random_normal_f32(c.ks.numel(), seed + 1));
  c.v = round_to(dt, random_normal_f32(c.ks.numel(), seed + 2));
  c.dout = round_to(dt, random_normal_f32(c.qs.numel(), seed + 3));
  OwnedTensor cq = cpu_tensor(c.q, c.qs), ck = cpu_tensor(c.k, c.ks), cv = cpu_tensor(c.v, c.ks);
  c.out = OwnedTensor(DType::F32, c.qs);
  c.lse = OwnedTensor(DType::F32, c.ls);
  const Tensor st = starts ? Tensor(const_cast<int32_t*>(starts->data()), DType::I32, {s.B, s.T}) : Tensor();
  const Tensor* stp = starts ? &st : nullptr;
  ops::attention_forward(c.out.t, c.lse.t, cq, ck, cv, stp);
  OwnedTensor out_rounded = cpu_tensor(round_to(dt, host_of(c.out.t)), c.qs);
  c.dq = OwnedTensor(DType::F32, c.qs);
  c.dk = OwnedTensor(DType::F32, c.ks);
  c.dv = OwnedTensor(DType::F32, c.ks);
  ops::attention_backward(c.dq.t, c.dk.t, c.dv.t, cpu_tensor(c.dout, c.qs), cq, ck, cv, out_rounded, c.lse, stp);
  return c;
}

Tol tol_for(DType dt) { return dt == DType::BF16 ? Tol{1e-2, 1e-2} : Tol{1e-4, 1e-5}; }

void expect_close(const std::string& what, const std::vector<float>& want,
                  const std::vector<float>& got, Tol tol, double scale) {
  ASSERT_EQ(want.size(), got.size()) << what;
  double maxabs = scale;
  for (float w : want) maxabs = std::max(maxabs, std::fabs(static_cast<double>(w)));
  const double atol = tol.atol_frac * maxabs + 1e-30;
  size_t bad = 0, worst = 0;
  double worst_excess = -1e300;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double excess = std::isnan(got[i]) ? 1e300 : err - (atol + tol.rtol * std::fabs(want[i]));
    if (excess > 0) ++bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << want.size()
                     << " elements differ; worst at " << worst << ": want " << want[worst]
                     << ", got " << got[worst] << " (rtol " << tol.rtol << ", atol " << atol << ")";
}

}  // namespace weft::gpu_test

#endif  // WEFT_HAVE_CUDA
