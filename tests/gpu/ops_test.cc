// Every CUDA op against the CPU op (fp32) on fresh random inputs, in f32 and
// bf16, at shapes that are not multiples of the kernels' tile or block sizes.
// Overwritten outputs are poisoned (NaN) before each GPU run; accumulated
// outputs start from random values on both sides. Inputs are rounded to the
// GPU dtype before the CPU reference sees them (gpu_test_util.h: tolerances).
#ifdef WEFT_HAVE_CUDA

#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <tuple>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/cuda/cuda_ops.h"

namespace weft::gpu_test {
namespace {

const DType kFloatTypes[] = {DType::F32, DType::BF16};

std::string name(DType dt) { return dtype_name(dt); }

TEST(CudaOps, Matmul) {
  WEFT_REQUIRE_GPU();
  struct Mnk {
    int64_t M, N, K;
  };
  for (DType dt : kFloatTypes)
    for (Mnk s : {Mnk{1, 1, 1}, Mnk{17, 33, 65}, Mnk{64, 48, 200}, Mnk{5, 130, 3}})
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
          for (DType cdt : {DType::F32, dt}) {
            SCOPED_TRACE(name(dt) + " c " + name(cdt) + " M" + std::to_string(s.M) + " N" +
                         std::to_string(s.N) + " K" + std::to_string(s.K) + " ta" +
                         std::to_string(ta) + " tb" + std::to_string(tb));
            const Shape sa = ta ? Shape{s.K, s.M} : Shape{s.M, s.K};
            const Shape sb = tb ? Shape{s.N, s.K} : Shape{s.K, s.N};
            auto a = round_to(dt, random_normal_f32(sa.numel(), 1));
            auto b = round_to(dt, random_normal_f32(sb.numel(), 2));
            auto c0 = round_to(cdt, random_normal_f32(s.M * s.N, 3));
            // beta = 1 into an f32 c is the weight-gradient accumulation path.
            const float alpha = 0.5f, beta = cdt == DType::F32 ? 1.0f : 0.0f;
            OwnedTensor ca = cpu_tensor(a, sa), cb = cpu_tensor(b, sb),
                        cc = cpu_tensor(c0, {s.M, s.N});
            ops::matmul(cc.t, ca, cb, ta, tb, alpha, beta);
            OwnedTensor ga = gpu_tensor(a, dt, sa), gb = gpu_tensor(b, dt, sb);
            OwnedTensor gc = gpu_tensor(c0, cdt, {s.M, s.N});
            if (beta == 0.0f) poison(gc.t);
            ops::matmul(gc.t, ga, gb, ta, tb, alpha, beta);
            Tol tol = tol_for(cdt);
            if (dt == DType::F32) tol.atol_frac = 1e-5 * std::sqrt(double(s.K));
            expect_close("matmul", host_of(cc.t), download(gc.t), tol);
          }
}

TEST(CudaOps, Embedding) {
  WEFT_REQUIRE_GPU();
  for (DType dt : kFloatTypes)
    for (int64_t N : {1, 37, 300}) {
      SCOPED_TRACE(name(dt) + " N" + std::to_string(N));
      const int64_t V = 23, C = 70;  // N > V: tokens repeat, so backward accumulates
      auto tok = random_tokens(N, V, 4);
      auto w = round_to(dt, random_normal_f32(V * C, 5));
      auto dout = round_to(dt, random_normal_f32(N * C, 6));
      auto dw0 = random_normal_f32(V * C, 7);
      OwnedTensor ct = cpu_ints(tok, {N}), cw = cpu_tensor(w, {V, C});
      OwnedTensor cout_(DType::F32, {N, C});
      ops::embedding_forward(cout_.t, ct, cw);
      OwnedTensor cdw = cpu_tensor(dw0, {V, C});
      ops::embedding_backward(cdw.t, ct, cpu_tensor(dout, {N, C}));

      OwnedTensor gt = gpu_ints(tok, {N}), gw = gpu_tensor(w, dt, {V, C});
      OwnedTensor gout = gpu_empty(dt, {N, C});
      ops::embedding_forward(gout.t, gt, gw);
      expect_close("embedding_forward", host_of(cout_.t), download(gout.t), Tol{0, 0});
      OwnedTensor gdw = gpu_tensor(dw0, DType::F32, {V, C});
      ops::embedding_backward(gdw.t, gt, gpu_tensor(dout, dt, {N, C}));
      expect_close("embedding_backward", host_of(cdw.t), download(gdw.t), Tol{1e-5, 1e-6});
    }
}

TEST(CudaOps, RmsNorm) {
  WEFT_REQUIRE_GPU();
  for (DType dt : kFloatTypes)
    // 5000 x 768: dw in 157 chunks of 32 rows, three column blocks of packs.
    for (auto [N, C] : {std::pair<int64_t, int64_t>{1, 1}, {7, 33}, {300, 1000}, {3, 2050}, {5000, 768}}) {
      SCOPED_TRACE(name(dt) + " N" + std::to_string(N) + " C" + std::to_string(C));
      const float eps = 1e-5f;
      auto x = round_to(dt, random_normal_f32(N * C, 8));
      auto w = round_to(dt, random_normal_f32(C, 9));
      auto dout = round_to(dt, random_normal_f32(N * C, 10));
      auto dw0 = random_normal_f32(C, 11);
      OwnedTensor cx = cpu_tensor(x, {N, C}), cw = cpu_tensor(w, {C});
      OwnedTensor cout_(DType::F32, {N, C}), crstd(DType::F32, {N}), cdx(DType::F32, {N, C});
      OwnedTensor cdw = cpu_tensor(dw0, {C});
      ops::rmsnorm_forward(cout_.t, crstd.t, cx, cw, eps);
      ops::rmsnorm_backward(cdx.t, cdw.t, cpu_tensor(dout, {N, C}), cx, cw, crstd);

      OwnedTensor gx = gpu_tensor(x, dt, {N, C}), gw = gpu_tensor(w, dt, {C});
      OwnedTensor gout = gpu_empty(dt, {N, C}), grstd = gpu_empty(DType::F32, {N});
      OwnedTensor gdx = gpu_empty(dt, {N, C}), gdw = gpu_tensor(dw0, DType::F32, {C});
      ops::rmsnorm_forward(gout.t, grstd.t, gx, gw, eps);
      expect_close("rmsnorm out", host_of(cout_.t), download(gout.t), tol_for(dt));
      expect_close("rmsnorm rstd", host_of(crstd.t), download(grstd.t), tol_for(DType::F32));
      ops::rmsnorm_backward(gdx.t, gdw.t, gpu_tensor(dout, dt, {N, C}), gx, gw, grstd);
      // dx = rstd (w dout - xhat mean(xhat w dout)) cancels to ~0 when C is
      // small (exactly 0 for C = 1): measure its error against the size of
      // the terms, rstd |w dout|, not against the tiny result.
      double terms = 0;
      const std::vector<float> rstd = host_of(crstd.t);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
          terms = std::max(terms, std::fabs(double(rstd[n]) * w[c] * dout[n * C + c]));
      expect_close("rmsnorm dx", host_of(cdx.t), download(gdx.t), tol_for(dt), terms);
      // dw sums N products: fp32 order differs from the CPU's (row chunks).
      expect_close("rmsnorm dw", host_of(cdw.t), download(gdw.t), Tol{1e-4, 1e-5});
      // accumulate: dx += d/dx in one pass, as the residual stream takes it.
      auto prev = round_to(dt, random_normal_f32(N * C, 13));
      OwnedTensor gacc = gpu_tensor(prev, dt, {N, C}), gdw2 = gpu_tensor(dw0, DType::F32, {C});
      ops::rmsnorm_backward(gacc.t, gdw2.t, gpu_tensor(dout, dt, {N, C}), gx, gw, grstd, true);
      std::vector<float> want = host_of(cdx.t);
      double prev_max = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        want[i] += prev[i];
        prev_max = std::max(prev_max, double(std::fabs(prev[i])));
      }
      expect_close("rmsnorm dx accumulated", want, download(gacc.t), tol_for(dt), terms + prev_max);
      expect_close("rmsnorm dw (accumulating dx)", host_of(cdw.t), download(gdw2.t), Tol{1e-4, 1e-5});
      // The same dw from the same inputs, to the bit: the reduction's order
      // is fixed (no atomics), so steps repeat exactly.
      EXPECT_EQ(download(gdw.t), download(gdw2.t)) << "dw differs between two identical calls";
    }
}

TEST(CudaOps, Rope) {
  WEFT_REQUIRE_GPU();
  // pos0 > 0 is a sequence-parallel rank's slice; 3000 + 300 positions grow
  // the device's cos/sin table past its first size. Head dims: 2 and 10 one
  // pair per thread, 24 packed in f32 only, 64 and 128 packed in both.
  for (DType dt : kFloatTypes)
    for (int64_t pos0 : {int64_t{0}, int64_t{3000}})
    for (auto sh : {Shape{1, 1, 1, 2}, Shape{2, 37, 3, 10}, Shape{1, 300, 2, 64}, Shape{2, 41, 3, 24},
                    Shape{2, 50, 4, 128}}) {
      SCOPED_TRACE(name(dt) + " " + sh.str() + " pos0 " + std::to_string(pos0));
      const float theta = 10000.0f;
      auto x = round_to(dt, random_normal_f32(sh.numel(), 12));
      OwnedTensor cy(DType::F32, sh), cdx(DType::F32, sh);
      ops::rope_forward(cy.t, cpu_tensor(x, sh), theta, pos0);
      ops::rope_backward(cdx.t, cpu_tensor(x, sh), theta, pos0);
      OwnedTensor gx = gpu_tensor(x, dt, sh), gy = gpu_empty(dt, sh), gdx = gpu_empty(dt, sh);
      ops::rope_forward(gy.t, gx, theta, pos0);
      ops::rope_backward(gdx.t, gx, theta, pos0);
      expect_close("rope_forward", host_of(cy.t), download(gy.t), tol_for(dt));
      expect_close("rope_backward", host_of(cdx.t), download(gdx.t), tol_for(dt));
      ops::rope_forward(gx.t, gx.t, theta, pos0);  // in place
      expect_close("rope_forward in place", host_of(cy.t), download(gx.t), tol_for(dt));
    }
}

// Packed documents: each row's position is its position in its document,
// from a device table, under a slice's pos0 (ignored then) and in place.
TEST(CudaOps, RopeWithPositionsTable) {
  WEFT_REQUIRE_GPU();
  for (DType dt : kFloatTypes)
    for (auto sh : {Shape{2, 37, 3, 10}, Shape{1, 300, 2, 64}, Shape{2, 50, 4, 128}}) {
      SCOPED_TRACE(name(dt) + " " + sh.str());
      const int64_t B = sh[0], T = sh[1], pos0 = 3000;
      std::vector<int32_t> pos(static_cast<size_t>(B * T));
      for (int64_t r = 0; r < B * T; ++r) pos[r] = static_cast<int32_t>((r * 7 + 3) % (pos0 + T));
      const Tensor hpos(pos.data(), DType::I32, {B, T});
      OwnedTensor gpos(DType::I32, {B, T}, Device::CUDA);
      ops::transfer(gpos.t, hpos);
      const Rope rope = Rope::llama3(500000.0, 32.0, 1.0, 4.0, 8192);
      auto x = round_to(dt, random_normal_f32(sh.numel(), 16));
      OwnedTensor cy(DType::F32, sh), cdx(DType::F32, sh);
      ops::rope_forward(cy.t, cpu_tensor(x, sh), rope, pos0, &hpos);
      ops::rope_backward(cdx.t, cpu_tensor(x, sh), rope, pos0, &hpos);
      OwnedTensor gx = gpu_tensor(x, dt, sh), gy = gpu_empty(dt, sh), gdx = gpu_empty(dt, sh);
      ops::rope_forward(gy.t, gx, rope, pos0, &gpos.t);
      ops::rope_backward(gdx.t, gx, rope, pos0, &gpos.t);
      expect_close("rope_forward positions", host_of(cy.t), download(gy.t), tol_for(dt));
      expect_close("rope_backward positions", host_of(cdx.t), download(gdx.t), tol_for(dt));
      ops::rope_forward(gx.t, gx.t, rope, pos0, &gpos.t);
      expect_close("rope_forward positions in place", host_of(cy.t), download(gx.t), tol_for(dt));
    }
}

TEST(CudaOps, SwiGlu) {
  WEFT_REQUIRE_GPU();
  for (DType dt : kFloatTypes)
    for (int64_t n : {1, 1000, 70001}) {
      SCOPED_TRACE(name(dt) + " n" + std::to_string(n));
      auto g = round_to(dt, random_normal_f32(n, 13, 3.0f));
      auto u = round_to(dt, random_normal_f32(n, 14));
      auto d = round_to(dt, random_normal_f32(n, 15));
      OwnedTensor co(DType::F32, {n}), cdg(DType::F32, {n}), cdu(DType::F32, {n});
      OwnedTensor cg = cpu_tensor(g, {n}), cu = cpu_tensor(u, {n});
      ops::swiglu_forward(co.t, cg, cu);
      ops::swiglu_backward(cdg.t, cdu.t, cpu_tensor(d, {n}), cg, cu);
      OwnedTensor gg = gpu_tensor(g, dt, {n}), gu = gpu_tensor(u, dt, {n});
      OwnedTensor go = gpu_empty(dt, {n}), gdg = gpu_empty(dt, {n}), gdu = gpu_empty(dt, {n});
      ops::swiglu_forward(go.t, gg, gu);
      ops::swiglu_backward(gdg.t, gdu.t, gpu_tensor(d, dt, {n}), gg, gu);
      expect_close("swiglu out", host_of(co.t), download(go.t), tol_for(dt));
      expect_close("swiglu dgate", host_of(cdg.t), download(gdg.t), tol_for(dt));
      expect_close("swiglu dup", host_of(cdu.t), download(gdu.t), tol_for(dt));
    }
}

TEST(CudaOps, CrossEntropy) {
  WEFT_REQUIRE_GPU();
  for (DType dt : kFloatTypes)
    // V = 4096: rows read in 16-byte packs; the others element by element.
    for (auto [N, V] : {std::pair<int64_t, int64_t>{1, 1}, {5, 37}, {64, 5003}, {48, 4096}}) {
      SCOPED_TRACE(name(dt) + " N" + std::to_string(N) + " V" + std::to_string(V));
      auto l = round_to(dt, random_normal_f32(N * V, 16, 2.0f));
      auto t = random_tokens(N, static_cast<int32_t>(V), 17);
      const float scale = 1.0f / static_cast<float>(N);
      OwnedTensor cl = cpu_tensor(l, {N, V}), ct = cpu_ints(t, {N});
      OwnedTensor closs(DType::F32, {N}), cd(DType::F32, {N, V});
      const double cmean = ops::cross_entropy_forward(closs.t, cl, ct);
      ops::cross_entropy_backward(cd.t, cl, ct, scale);

      OwnedTensor gl = gpu_tensor(l, dt, {N, V}), gt = gpu_ints(t, {N});
      OwnedTensor gloss = gpu_empty(DType::F32, {N}), gd = gpu_empty(dt, {N, V});
      const double gmean = ops::cross_entropy_forward(gloss.t, gl, gt);
      EXPECT_NEAR(gmean, cmean, 1e-4 * (1.0 + std::fabs(cmean)));
      expect_close("ce losses", host_of(closs.t), download(gloss.t), Tol{1e-5, 1e-5});
      // The chunked LM head's path: losses 3 rows at a time without a sync,
      // one mean_loss: the same losses and mean as the forward, to the bit.
      OwnedTensor gchunked = gpu_empty(DType::F32, {N});
      for (int64_t r0 = 0; r0 < N; r0 += 3) {
        const int64_t r1 = std::min(N, r0 + 3);
        ops::cross_entropy_losses(gchunked.t.slice0(r0, r1), gl.t.slice0(r0, r1), gt.t.slice0(r0, r1));
      }
      EXPECT_EQ(ops::mean_loss(gchunked.t), gmean);
      EXPECT_EQ(download(gchunked.t), download(gloss.t));
      ops::cross_entropy_backward(gd.t, gl, gt, scale);
      expect_close("ce dlogits", host_of(cd.t), download(gd.t), tol_for(dt));
      ops::cross_entropy_backward(gd.t, gl, gt, scale, &gloss.t);  // logsumexp from the losses
      expect_close("ce dlogits from losses", host_of(cd.t), download(gd.t), tol_for(dt));
      ops::cross_entropy_backward(gl.t, gl.t, gt, scale, &gloss.t);  // in place, as the LM head uses it
      expect_close("ce dlogits in place", host_of(cd.t), download(gl.t), tol_for(dt));
    }
}

TEST(CudaOps, Elementwise) {
  WEFT_REQUIRE_GPU();
  for (DType dt : kFloatTypes)
    for (int64_t n : {1, 1023, 300001}) {
      SCOPED_TRACE(name(dt) + " n" + std::to_string(n));
      auto x = round_to(dt, random_normal_f32(n, 18));
      auto y = random_normal_f32(n, 19);
      OwnedTensor gx = gpu_tensor(x, dt, {n});
      OwnedTensor gf = gpu_empty(dt, {n});
      ops::fill(gf.t, 1.5f);
      expect_close("fill", std::vector<float>(n, 1.5f), download(gf.t), Tol{0, 0});
      OwnedTensor gc = gpu_empty(dt, {n});
      ops::copy(gc.t, gx);
      expect_close("copy", x, download(gc.t), Tol{0, 0});
      // f32 accumulator += x of either dtype (the gradient-buffer path).
      OwnedTensor gy = gpu_tensor(y, DType::F32, {n});
      ops::add_acc(gy.t, gx);
      std::vector<float> want(n);
      for (int64_t i = 0; i < n; ++i) want[i] = y[i] + x[i];
      expect_close("add_acc", want, download(gy.t), Tol{0, 0});
      ops::scale(gx.t, -0.25f);
      for (int64_t i = 0; i < n; ++i) want[i] = x[i] * -0.25f;
      expect_close("scale", want, download(gx.t), Tol{0, 0});  // exact: power of two
      double ss = 0.0;
      for (float v : want) ss += static_cast<double>(v) * v;
      const double g1 = ops::sum_squares(gx.t), g2 = ops::sum_squares(gx.t);
      EXPECT_NEAR(g1, ss, 1e-9 * ss);
      EXPECT_EQ(g1, g2) << "sum_squares must be deterministic";
    }
}

// The Ulysses packing on the device equals the host's, for both loop orders
// (fewer leading rows than columns and the other way round) and both dtypes.
TEST(CudaOps, SwapLeadingDims) {
  WEFT_REQUIRE_GPU();
  for (DType dt : kFloatTypes)
    for (auto [A, C, R] : {std::tuple<int64_t, int64_t, int64_t>{2, 96, 384}, {4096, 4, 192}, {1, 1, 7}}) {
      SCOPED_TRACE(name(dt) + " A" + std::to_string(A) + " C" + std::to_string(C) + " R" + std::to_string(R));
      const int64_t n = A * C * R;
      const std::vector<float> x = round_to(dt, random_normal_f32(n, 23));
      std::vector<float> want(n);
      for (int64_t a = 0; a < A; ++a)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t r = 0; r < R; ++r) want[(c * A + a) * R + r] = x[(a * C + c) * R + r];
      OwnedTensor gx = gpu_tensor(x, dt, {n});
      OwnedTensor gy = gpu_empty(dt, {n});
      poison(gy.t);
      ops::swap_leading_dims(gy.t, gx, A, C);
      expect_close("swap_leading_dims", want, download(gy.t), Tol{0, 0});
    }
}

TEST(CudaOps, AdamW) {
  WEFT_REQUIRE_GPU();
  for (int64_t n : {1, 4097, 100003}) {
    SCOPED_TRACE("n" + std::to_string(n));
    auto p = random_normal_f32(n, 20), g = random_normal_f32(n, 21);
    auto m = random_normal_f32(n, 22, 0.1f), v = random_normal_f32(n, 23, 0.1f);
    for (float& x : v) x = x * x;
    const ops::AdamWParams h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 7};
    OwnedTensor cp = cpu_tensor(p, {n}), cm = cpu_tensor(m, {n}), cv = cpu_tensor(v, {n});
    ops::adamw_update(cp.t, cpu_tensor(g, {n}), cm.t, cv.t, h);
    OwnedTensor gp = gpu_tensor(p, DType::F32, {n}), gg = gpu_tensor(g, DType::F32, {n});
    OwnedTensor gm = gpu_tensor(m, DType::F32, {n}), gv = gpu_tensor(v, DType::F32, {n});
    ops::adamw_update(gp.t, gg, gm.t, gv.t, h);
    expect_close("adamw param", host_of(cp.t), download(gp.t), Tol{1e-5, 1e-6});
    expect_close("adamw m", host_of(cm.t), download(gm.t), Tol{1e-5, 1e-6});
    expect_close("adamw v", host_of(cv.t), download(gv.t), Tol{1e-5, 1e-6});

    // Mixed precision: the bf16 working copy is the rounded master.
    OwnedTensor mp = gpu_tensor(p, DType::F32, {n}), mm = gpu_tensor(m, DType::F32, {n});
    OwnedTensor mv = gpu_tensor(v, DType::F32, {n}), work = gpu_empty(DType::BF16, {n});
    cuda::adamw_update_master(mp.t, gg, mm.t, mv.t, work.t, h);
    const auto master = download(mp.t);
    expect_close("adamw master", host_of(cp.t), master, Tol{1e-5, 1e-6});
    expect_close("adamw working", round_to(DType::BF16, master), download(work.t), Tol{0, 0});
  }
}

// A bad target cannot abort inside a kernel; the forward's sync_and_check
// must report it. "threadsafe" re-executes the binary, so the child gets a
// fresh CUDA context instead of a forked one.
TEST(CudaOpsDeathTest, OutOfRangeTargetIsReported) {
  WEFT_REQUIRE_GPU();
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_DEATH(
      {
        OwnedTensor gl = gpu_tensor(random_normal_f32(2 * 7, 50), DType::F32, {2, 7});
        OwnedTensor gt = gpu_ints({3, 7}, {2});  // 7 is outside [0, 7)
        OwnedTensor gloss = gpu_empty(DType::F32, {2});
        ops::cross_entropy_forward(gloss.t, gl, gt);
      },
      "cross-entropy target outside the vocabulary");
  // Chunked: the chunk's kernel only flags it; the step's one sync reports it.
  EXPECT_DEATH(
      {
        OwnedTensor gl = gpu_tensor(random_normal_f32(2 * 7, 50), DType::F32, {2, 7});
        OwnedTensor gt = gpu_ints({3, 7}, {2});
        OwnedTensor gloss = gpu_empty(DType::F32, {2});
        ops::cross_entropy_losses(gloss.t.slice0(0, 1), gl.t.slice0(0, 1), gt.t.slice0(0, 1));
        ops::cross_entropy_losses(gloss.t.slice0(1, 2), gl.t.slice0(1, 2), gt.t.slice0(1, 2));
        ops::mean_loss(gloss.t);
      },
      "mean_loss: a CUDA kernel found bad input since the last check: a cross-entropy target");
}

// A positions table in host memory with device operands is refused by name
// (a WEFT_CHECK: the process ends, as every op's bad-argument check does).
TEST(CudaOpsDeathTest, HostPositionsTableWithDeviceOperandsIsRefused) {
  WEFT_REQUIRE_GPU();
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_DEATH(
      {
        std::vector<int32_t> pos(2 * 5, 1);
        const Tensor hpos(pos.data(), DType::I32, {2, 5});
        OwnedTensor gx = gpu_empty(DType::BF16, Shape{2, 5, 2, 8});
        OwnedTensor gy = gpu_empty(DType::BF16, Shape{2, 5, 2, 8});
        ops::rope_forward(gy.t, gx.t, Rope(10000.0), 0, &hpos);
      },
      "rope_forward: positions must be I32 on the operands' device \\(CUDA memory\\)");
}

}  // namespace
}  // namespace weft::gpu_test

#else
#include <gtest/gtest.h>
TEST(CudaOps, NotBuilt) { GTEST_SKIP() << "no CUDA device: weft was built without nvcc"; }
#endif
