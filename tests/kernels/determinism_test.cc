// Resume must reproduce an uninterrupted run exactly, so the kernels that
// reduce into shared outputs must not depend on the OpenMP thread count or
// on scheduling. Each op runs with 1 and with 3 threads; results must be
// bit-identical.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <functional>
#include <vector>

#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace weft {
namespace {

// Runs fn with n threads and returns what it wrote.
std::vector<float> with_threads(int n, const std::function<std::vector<float>()>& fn) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(n);
  auto out = fn();
  omp_set_num_threads(saved);
  return out;
}

void expect_bit_identical(const std::string& what, const std::function<std::vector<float>()>& fn) {
  auto one = with_threads(1, fn), three = with_threads(3, fn);
  ASSERT_EQ(one.size(), three.size());
  EXPECT_EQ(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)), 0) << what;
}

TEST(Determinism, ReductionsDoNotDependOnThreadCount) {
  const int64_t B = 2, T = 80, Hq = 4, Hkv = 2, D = 8, C = 200, V = 7;
  const int64_t N = B * T;
  auto q = test::to_f32(test::random_normal(B * T * Hq * D, 1));
  auto k = test::to_f32(test::random_normal(B * T * Hkv * D, 2));
  auto v = test::to_f32(test::random_normal(B * T * Hkv * D, 3));
  auto dout = test::to_f32(test::random_normal(B * T * Hq * D, 4));
  auto x = test::to_f32(test::random_normal(N * C, 5));
  auto w = test::to_f32(test::random_normal(C, 6));
  auto tokens = test::random_tokens(N, V, 7);

  expect_bit_identical("attention dq/dk/dv", [&] {
    Shape qs{B, T, Hq, D}, ks{B, T, Hkv, D};
    std::vector<float> out(q.size()), lse(B * Hq * T), dq(q.size()), dk(k.size()), dv(v.size());
    Tensor tq = Tensor::f32(q.data(), qs), tk = Tensor::f32(k.data(), ks),
           tv = Tensor::f32(v.data(), ks), to = Tensor::f32(out.data(), qs),
           tl = Tensor::f32(lse.data(), {B, Hq, T});
    ops::attention_forward(to, tl, tq, tk, tv);
    ops::attention_backward(Tensor::f32(dq.data(), qs), Tensor::f32(dk.data(), ks),
                            Tensor::f32(dv.data(), ks), Tensor::f32(dout.data(), qs), tq, tk, tv,
                            to, tl);
    dq.insert(dq.end(), dk.begin(), dk.end());
    dq.insert(dq.end(), dv.begin(), dv.end());
    return dq;
  });
  expect_bit_identical("rmsnorm dw", [&] {
    std::vector<float> out(x.size()), rstd(N), dx(x.size()), dw(C);
    Tensor tx = Tensor::f32(x.data(), {N, C}), tw = Tensor::f32(w.data(), {C});
    ops::rmsnorm_forward(Tensor::f32(out.data(), {N, C}), Tensor::f32(rstd.data(), {N}), tx, tw, 1e-5f);
    ops::rmsnorm_backward(Tensor::f32(dx.data(), {N, C}), Tensor::f32(dw.data(), {C}),
                          Tensor::f32(x.data(), {N, C}), tx, tw, Tensor::f32(rstd.data(), {N}));
    return dw;
  });
  expect_bit_identical("embedding dweight", [&] {
    std::vector<float> dw(V * C);
    ops::embedding_backward(Tensor::f32(dw.data(), {V, C}), Tensor::i32(tokens.data(), {N}),
                            Tensor::f32(x.data(), {N, C}));
    return dw;
  });
  expect_bit_identical("sum_squares and cross-entropy mean", [&] {
    std::vector<float> losses(N * C / V);
    double ss = ops::sum_squares(Tensor::f32(x.data(), {N * C}));
    auto targets = test::random_tokens(N * C / V, V, 8);
    double ce = ops::cross_entropy_forward(Tensor::f32(losses.data(), {N * C / V}),
                                           Tensor::f32(x.data(), {N * C / V, V}),
                                           Tensor::i32(targets.data(), {N * C / V}));
    return std::vector<float>{static_cast<float>(ss), static_cast<float>(ss - static_cast<float>(ss)),
                              static_cast<float>(ce), static_cast<float>(ce - static_cast<float>(ce))};
  });
}

// matmul spreads slabs of its output over OpenMP's threads, cut by shape
// only: every transpose case, slabs of rows (M >= N) and of columns, with a
// ragged last slab, and a product small enough for one BLAS call.
TEST(Determinism, MatmulDoesNotDependOnThreadCount) {
  struct Case { int64_t M, N, K; };
  for (Case cs : {Case{600, 300, 96}, Case{200, 700, 96}, Case{1000, 1000, 8}, Case{64, 64, 64}}) {
    auto a = test::to_f32(test::random_normal(cs.M * cs.K, 11));
    auto b = test::to_f32(test::random_normal(cs.K * cs.N, 12));
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        expect_bit_identical("matmul " + std::to_string(cs.M) + "x" + std::to_string(cs.N) + "x" +
                                 std::to_string(cs.K) + (ta ? " ta" : "") + (tb ? " tb" : ""),
                             [&] {
                               std::vector<float> c(cs.M * cs.N, 0.5f);
                               Shape as = ta ? Shape{cs.K, cs.M} : Shape{cs.M, cs.K};
                               Shape bs = tb ? Shape{cs.N, cs.K} : Shape{cs.K, cs.N};
                               ops::matmul(Tensor::f32(c.data(), {cs.M, cs.N}),
                                           Tensor::f32(a.data(), as), Tensor::f32(b.data(), bs),
                                           ta, tb, 1.0f, 0.25f);
                               return c;
                             });
        // ... and each slab computes its own part of the product.
        std::vector<float> c(cs.M * cs.N, 0.5f);
        ops::matmul(Tensor::f32(c.data(), {cs.M, cs.N}),
                    Tensor::f32(a.data(), ta ? Shape{cs.K, cs.M} : Shape{cs.M, cs.K}),
                    Tensor::f32(b.data(), tb ? Shape{cs.N, cs.K} : Shape{cs.K, cs.N}), ta, tb, 1.0f,
                    0.25f);
        for (int64_t i = 0; i < cs.M; i += 7) {
          for (int64_t j = 0; j < cs.N; j += 5) {
            double want = 0.125;
            for (int64_t k = 0; k < cs.K; ++k) {
              want += static_cast<double>(ta ? a[k * cs.M + i] : a[i * cs.K + k]) *
                      (tb ? b[j * cs.K + k] : b[k * cs.N + j]);
            }
            ASSERT_NEAR(c[i * cs.N + j], want, 1e-3) << "c[" << i << "," << j << "]";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace weft
