#include "support/collective_checks.h"

#include <cmath>
#include <cstdio>

#include "tensor/bf16.h"

namespace weft::testing {

using weft::bf16_to_f32;
using comm::Communicator;
using weft::f32_to_bf16;
using comm::reduce_op_name;
using comm::ReduceOp;
using comm::WorkPtr;

namespace {

// A typed host buffer with a guard element on each side, so a collective that
// writes outside its view is caught.
struct Buf {
  DType dt;
  int64_t n;
  std::vector<float> f;
  std::vector<uint16_t> h;
  Buf(DType t, int64_t count) : dt(t), n(count) {
    if (t == DType::F32)
      f.assign(count + 2, -100.0f);
    else
      h.assign(count + 2, f32_to_bf16(-100.0f));
  }
  Tensor view() {
    void* p =
        dt == DType::F32 ? static_cast<void*>(f.data() + 1) : static_cast<void*>(h.data() + 1);
    return Tensor(p, dt, Shape{n});
  }
  double get(int64_t i) const { return dt == DType::F32 ? f[i + 1] : bf16_to_f32(h[i + 1]); }
  void set(int64_t i, double v) {
    if (dt == DType::F32)
      f[i + 1] = static_cast<float>(v);
    else
      h[i + 1] = f32_to_bf16(static_cast<float>(v));
  }
  bool guards_ok() const { return get(-1) == -100.0 && get(n) == -100.0; }
};

// Input values: small integers (+ .5 in f32) so sums are exact in both dtypes.
double value(DType dt, int grank, int64_t i) {
  return dt == DType::F32 ? (grank + 1) * 0.5 + static_cast<double>(i % 7)
                          : grank + static_cast<double>(i % 5);
}

}  // namespace

std::vector<CollectiveGrid> collective_grids() {
  return {{1, 1, 1}, {2, 1, 1}, {3, 1, 1}, {3, 3, 1}, {4, 2, 2}, {4, 1, 4}, {4, 2, 1}};
}

std::string grid_name(const CollectiveGrid& g) {
  return "world" + std::to_string(g.world) + "_sp" + std::to_string(g.sp) + "_wp" +
         std::to_string(g.wp);
}

void CollectiveChecks::issue_all(Communicator& c) {
  std::vector<WorkPtr>& works = works_;
  std::vector<Check>& checks = checks_;
  std::vector<std::shared_ptr<void>>& keep = buffers_;
  const int n = c.size(), me = c.rank();
  const std::vector<int>& m = c.members();
  const int grank = m[me];
  // Sums are exact; an average rounds once (bf16: half a step near 16).
  auto tol = [](DType dt, ReduceOp op) {
    return op == ReduceOp::Sum ? 0.0 : dt == DType::BF16 ? 0.05 : 1e-5;
  };
  std::string g = c.name() + "[" + std::to_string(m.front()) + "..]";

  for (DType dt : {DType::F32, DType::BF16}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      std::string tag = g + " " + dtype_name(dt) + " " + reduce_op_name(op);
      // all_reduce on an odd-length slice at an offset of a larger buffer.
      auto b = std::make_shared<Buf>(dt, 1003);
      for (int64_t i = 0; i < b->n; ++i) b->set(i, value(dt, grank, i));
      keep.push_back(b);
      works.push_back(c.all_reduce(b->view().slice0(2, 2 + 997), op));
      checks.push_back({"all_reduce " + tag, [=](Mismatches& expect_near) {
                          for (int64_t i = 0; i < b->n; ++i) {
                            double want = value(dt, grank, i);
                            if (i >= 2 && i < 999) {
                              double s = 0;
                              for (int r : m) s += value(dt, r, i);
                              want = op == ReduceOp::Avg ? s / n : s;
                            }
                            expect_near("all_reduce " + tag + " i=" + std::to_string(i), b->get(i),
                                        want, tol(dt, op));
                          }
                          if (!b->guards_ok()) expect_near("all_reduce guard " + tag, 0, 1);
                        }});

      // reduce_scatter: equal split, uneven counts (one rank may get none),
      // in place (the output is this rank's share inside the input, as ZeRO
      // calls it), and shares of several of the ring's 1 MiB segments.
      for (const char* variant : {"equal", "uneven", "in-place", "segmented"}) {
        const std::string v = variant;
        const bool uneven = v == "uneven", in_place = v == "in-place";
        std::vector<int64_t> counts;
        for (int r = 0; r < n; ++r)
          counts.push_back(uneven ? (r == n - 1 && n > 1 ? 0 : 5 + 3 * r) : v == "segmented" ? 700001 : 37);
        int64_t total = 0, off = 0;
        for (int r = 0; r < n; ++r) total += counts[r], off += r < me ? counts[r] : 0;
        auto in = std::make_shared<Buf>(dt, total);
        auto out = std::make_shared<Buf>(dt, counts[me]);
        for (int64_t i = 0; i < total; ++i) in->set(i, value(dt, grank, i));
        keep.push_back(in), keep.push_back(out);
        Tensor output = in_place ? in->view().slice0(off, off + counts[me]) : out->view();
        works.push_back(c.reduce_scatter(in->view(), output, op, uneven ? counts : std::vector<int64_t>{}));
        std::string t2 = "reduce_scatter " + tag + " " + v;
        checks.push_back({t2, [=](Mismatches& expect_near) {
                            auto got = [&](int64_t i) { return in_place ? in->get(off + i) : out->get(i); };
                            for (int64_t i = 0; i < counts[me]; ++i) {
                              double s = 0;
                              for (int r : m) s += value(dt, r, off + i);
                              expect_near(t2 + " i=" + std::to_string(i), got(i), op == ReduceOp::Avg ? s / n : s,
                                          tol(dt, op));
                            }
                            for (int64_t i = 0; i < total; ++i)
                              if (!in_place || i < off || i >= off + counts[me])
                                expect_near(t2 + " input kept", in->get(i), value(dt, grank, i));
                            if (!out->guards_ok() || !in->guards_ok()) expect_near("reduce_scatter guard " + t2, 0, 1);
                          }});
      }
    }

    // all_gather: equal (in place: input is our share of output) and uneven.
    for (bool uneven : {false, true}) {
      std::vector<int64_t> counts;
      for (int r = 0; r < n; ++r) counts.push_back(uneven ? 2 * r + 1 : 11);
      int64_t total = 0, off = 0;
      for (int r = 0; r < n; ++r) total += counts[r], off += r < me ? counts[r] : 0;
      auto out = std::make_shared<Buf>(dt, total);
      auto in = std::make_shared<Buf>(dt, counts[me]);
      for (int64_t i = 0; i < counts[me]; ++i) in->set(i, value(dt, grank, i));
      Tensor input = in->view();
      if (!uneven) {  // in place
        for (int64_t i = 0; i < counts[me]; ++i) out->set(off + i, value(dt, grank, i));
        input = out->view().slice0(off, off + counts[me]);
      }
      keep.push_back(in), keep.push_back(out);
      works.push_back(c.all_gather(input, out->view(), uneven ? counts : std::vector<int64_t>{}));
      std::string t2 = std::string("all_gather ") + g + " " + dtype_name(dt) +
                       (uneven ? " uneven" : " in-place");
      checks.push_back({t2, [=](Mismatches& expect_near) {
                          int64_t o = 0;
                          for (int r = 0; r < n; ++r)
                            for (int64_t i = 0; i < counts[r]; ++i, ++o)
                              expect_near(t2 + " r=" + std::to_string(r), out->get(o),
                                          value(dt, m[r], i));
                          if (!out->guards_ok()) expect_near("all_gather guard " + t2, 0, 1);
                        }});
    }

    // all_to_all: element k from group rank s to group rank j is s*20+j*5+k
    // (exact in bf16); equal split and uneven counts.
    for (bool uneven : {false, true}) {
      auto cnt = [&](int s, int j) -> int64_t { return uneven ? 1 + s + 2 * j : 3; };
      std::vector<int64_t> sc, rc;
      for (int j = 0; j < n; ++j) sc.push_back(cnt(me, j)), rc.push_back(cnt(j, me));
      int64_t st = 0, rt = 0;
      for (int j = 0; j < n; ++j) st += sc[j], rt += rc[j];
      auto in = std::make_shared<Buf>(dt, st);
      auto out = std::make_shared<Buf>(dt, rt);
      int64_t o = 0;
      for (int j = 0; j < n; ++j)
        for (int64_t k = 0; k < sc[j]; ++k) in->set(o++, me * 20 + j * 5 + k);
      keep.push_back(in), keep.push_back(out);
      works.push_back(uneven ? c.all_to_all(in->view(), out->view(), sc, rc)
                             : c.all_to_all(in->view(), out->view()));
      std::string t2 =
          std::string("all_to_all ") + g + " " + dtype_name(dt) + (uneven ? " uneven" : "");
      checks.push_back({t2, [=](Mismatches& expect_near) {
                          int64_t o2 = 0;
                          for (int s = 0; s < n; ++s)
                            for (int64_t k = 0; k < rc[s]; ++k)
                              expect_near(t2, out->get(o2++), s * 20 + me * 5 + k);
                          if (!out->guards_ok()) expect_near("all_to_all guard " + t2, 0, 1);
                        }});
    }

    // broadcast from the last group rank.
    auto b = std::make_shared<Buf>(dt, 129);
    for (int64_t i = 0; i < b->n; ++i) b->set(i, value(dt, grank, i));
    keep.push_back(b);
    works.push_back(c.broadcast(b->view(), n - 1));
    std::string t3 = std::string("broadcast ") + g + " " + dtype_name(dt);
    checks.push_back({t3, [=](Mismatches& expect_near) {
                        for (int64_t i = 0; i < b->n; ++i)
                          expect_near(t3, b->get(i), value(dt, m[n - 1], i));
                      }});
  }
  works.push_back(c.barrier());
}

void CollectiveChecks::Mismatches::operator()(const std::string& what, double got, double want,
                                              double tol) {
  if (std::fabs(got - want) <= tol) return;
  char line[64];
  std::snprintf(line, sizeof line, ": got %.6g want %.6g", got, want);
  lines.push_back(what + line);
}

std::vector<std::string> CollectiveChecks::verify() const {
  Mismatches wrong;
  for (const Check& c : checks_) c.verify(wrong);
  return wrong.lines;
}

}  // namespace weft::testing
