// Embedding and SwiGLU: forwards against the definition, backwards against
// finite differences, accumulation of the embedding gradient, range errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/embedding.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace weft {
namespace {

using test::expect_all_close;
using test::random_normal;

TEST(Embedding, ForwardGathersRowsAndBackwardMatchesFiniteDifferences) {
  const int64_t N = 9, C = 70, V = 5;  // N > V: tokens repeat, C crosses a column block
  auto tokens = test::random_tokens(N, V, 1);
  tokens[0] = tokens[N - 1] = 3;
  auto w = random_normal(V * C, 2), r = random_normal(N * C, 3);
  std::vector<double> out(N * C, NAN);
  cpu::embedding_forward<double>(out.data(), tokens.data(), w.data(), N, C, V);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[n * C + c], w[tokens[n] * C + c]);

  std::vector<double> dw(V * C, 0.0);
  cpu::embedding_backward<double>(dw.data(), tokens.data(), r.data(), N, C, V);
  auto loss = [&] {
    std::vector<double> o(N * C);
    cpu::embedding_forward<double>(o.data(), tokens.data(), w.data(), N, C, V);
    return test::weighted_sum(o, r);
  };
  test::expect_gradient("dweight", w, dw, loss, 400);

  auto twice = dw;
  for (auto& v : twice) v *= 2;
  cpu::embedding_backward<double>(dw.data(), tokens.data(), r.data(), N, C, V);
  expect_all_close("dweight accumulated twice", twice, dw, 1e-14, 1e-14);

  // fp32 dispatch, with [B, T] tokens and [B, T, C] activations.
  auto wf = test::to_f32(w), rf = test::to_f32(r);
  std::vector<float> outf(N * C), dwf(V * C, 0.0f);
  Tensor tok = Tensor::i32(tokens.data(), {1, N});
  ops::embedding_forward(Tensor::f32(outf.data(), {1, N, C}), tok, Tensor::f32(wf.data(), {V, C}));
  ops::embedding_backward(Tensor::f32(dwf.data(), {V, C}), tok, Tensor::f32(rf.data(), {1, N, C}));
  expect_all_close("out f32", out, test::to_f64(outf), 1e-7, 0);
  for (auto& v : twice) v /= 2;
  expect_all_close("dweight f32", twice, test::to_f64(dwf), 1e-5, 1e-5);
}

TEST(Embedding, RejectsOutOfRangeTokensAndBadShapes) {
  test::use_threadsafe_death_tests();
  std::vector<int32_t> tokens = {0, 4, 1};
  std::vector<float> w(4 * 2), out(3 * 2);
  EXPECT_DEATH(ops::embedding_forward(Tensor::f32(out.data(), {3, 2}),
                                      Tensor::i32(tokens.data(), {3}), Tensor::f32(w.data(), {4, 2})),
               "embedding_forward: token 4 at position 1 is outside the vocabulary \\[0, 4\\)");
  EXPECT_DEATH(ops::embedding_forward(Tensor::f32(out.data(), {2, 3}),
                                      Tensor::i32(tokens.data(), {3}), Tensor::f32(w.data(), {4, 2})),
               "embedding_forward: activations expected shape \\[3, 2\\].*got \\[2, 3\\]");
}

double silu(double g) { return g / (1 + std::exp(-g)); }

TEST(Swiglu, ForwardAndBackwardMatchDefinitionAndFiniteDifferences) {
  const int64_t n = 7 * 11;
  auto gate = random_normal(n, 4, 3.0), up = random_normal(n, 5), r = random_normal(n, 6);
  gate[0] = -800;  // exp overflow must give silu = 0, not NaN
  std::vector<double> out(n), want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = silu(gate[i]) * up[i];
  cpu::swiglu_forward<double>(out.data(), gate.data(), up.data(), n);
  expect_all_close("out", want, out, 1e-14, 1e-300);

  std::vector<double> dgate(n, 5.0), dup(n, 5.0);
  cpu::swiglu_backward<double>(dgate.data(), dup.data(), r.data(), gate.data(), up.data(), n);
  EXPECT_EQ(dgate[0], 0.0);
  auto loss = [&] {
    std::vector<double> o(n);
    cpu::swiglu_forward<double>(o.data(), gate.data(), up.data(), n);
    return test::weighted_sum(o, r);
  };
  test::expect_gradient("dgate", gate, dgate, loss);
  test::expect_gradient("dup", up, dup, loss);

  auto gf = test::to_f32(gate), uf = test::to_f32(up), rf = test::to_f32(r);
  std::vector<float> outf(n), dgf(n), duf(n);
  Shape s{7, 11};
  ops::swiglu_forward(Tensor::f32(outf.data(), s), Tensor::f32(gf.data(), s), Tensor::f32(uf.data(), s));
  ops::swiglu_backward(Tensor::f32(dgf.data(), s), Tensor::f32(duf.data(), s),
                       Tensor::f32(rf.data(), s), Tensor::f32(gf.data(), s), Tensor::f32(uf.data(), s));
  expect_all_close("out f32", out, test::to_f64(outf), 1e-5, 1e-6);
  expect_all_close("dgate f32", dgate, test::to_f64(dgf), 1e-5, 1e-6);
  expect_all_close("dup f32", dup, test::to_f64(duf), 1e-5, 1e-6);
}

TEST(Swiglu, RejectsMismatchedShapes) {
  test::use_threadsafe_death_tests();
  std::vector<float> buf(64);
  EXPECT_DEATH(ops::swiglu_forward(Tensor::f32(buf.data(), {4, 8}), Tensor::f32(buf.data(), {4, 8}),
                                   Tensor::f32(buf.data(), {8, 4})),
               "swiglu_forward: up expected shape \\[4, 8\\], got \\[8, 4\\]");
}

}  // namespace
}  // namespace weft
