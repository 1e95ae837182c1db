#include "model/llama.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <string>
#include <memory>
#include <vector>

namespace weft {
namespace {

ModelConfig small(bool tied) {
  ModelConfig m;
  m.vocab_size = 50;
  m.d_model = 32;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.ffn_hidden = 48;
  m.max_seq_len = 16;
  m.tie_embeddings = tied;
  m.init_std = 0.1;
  return m;
}

TEST(LlamaParams, TableIsInBackwardOrderWithHuggingFaceNames) {
  std::vector<ParamInfo> t = llama_param_table(small(false));
  ASSERT_EQ(t.size(), 2u + 2 * 9 + 1);
  EXPECT_EQ(t.front().name, "lm_head.weight");
  EXPECT_EQ(t[1].name, "model.norm.weight");
  EXPECT_EQ(t[2].name, "model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(t[10].name, "model.layers.1.input_layernorm.weight");
  EXPECT_EQ(t[11].name, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(t[18].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(t.back().name, "model.embed_tokens.weight");
  int64_t offset = 0;
  for (const ParamInfo& p : t) {
    EXPECT_EQ(p.offset, offset) << p.name;
    EXPECT_EQ(p.numel, p.shape.numel()) << p.name;
    offset += p.numel;
  }
  // k/v projections are narrower with grouped KV heads: (2 heads * 8) x 32.
  EXPECT_EQ(t[8].name, "model.layers.1.self_attn.k_proj.weight");
  EXPECT_EQ(t[8].shape, Shape({16, 32}));
  EXPECT_EQ(t[4].shape, Shape({48, 32}));  // up_proj [F, C]
}

TEST(LlamaParams, TiedEmbeddingsHaveNoLmHead) {
  Llama m(small(true));
  EXPECT_EQ(m.find_param("lm_head.weight"), -1);
  EXPECT_EQ(m.params().front().name, "model.norm.weight");
  int64_t expected = 50 * 32 + 32 + 2 * (32 + 32 + 32 * 32 * 2 + 16 * 32 * 2 + 48 * 32 * 3);
  EXPECT_EQ(m.num_params(), expected);
}

// head_dim apart from d_model / n_heads: the attention projections are
// n_heads * head_dim (and n_kv_heads * head_dim) wide, the rest d_model; a
// forward and backward run on those shapes.
TEST(LlamaParams, ExplicitHeadDimShapesTheAttentionProjections) {
  ModelConfig c = small(false);
  c.explicit_head_dim = 12;  // 4 heads x 12 = 48, not d_model 32
  Llama m(c);
  auto shape = [&](const std::string& name) { return m.params()[m.find_param("model.layers.0.self_attn." + name)].shape; };
  EXPECT_EQ(shape("q_proj.weight"), Shape({48, 32}));
  EXPECT_EQ(shape("k_proj.weight"), Shape({24, 32}));
  EXPECT_EQ(shape("v_proj.weight"), Shape({24, 32}));
  EXPECT_EQ(shape("o_proj.weight"), Shape({32, 48}));
  m.init(3);
  std::vector<int32_t> tokens(2 * 8), targets(2 * 8);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 7 % 50), targets[i] = int32_t(i * 3 % 50);
  const double loss = m.forward(tokens.data(), targets.data(), 2, 8);
  EXPECT_NEAR(loss, std::log(50.0), 1.0);
  m.zero_grads();
  m.backward(1.0f / 16);
  const Tensor g = m.grad(m.find_param("model.layers.0.self_attn.q_proj.weight"));
  double norm = 0;
  for (int64_t i = 0; i < g.numel(); ++i) norm += double(g.f32()[i]) * g.f32()[i];
  EXPECT_GT(norm, 0);
}

// Packed documents: a row of several documents, with their starts, gives
// each position the loss it has when its document is a sequence of its own,
// and the gradient of the summed loss is the sum of the documents' gradients
// trained one by one (llama3 RoPE, whose positions restart per document).
TEST(LlamaDocuments, PackedRowTrainsAsItsDocumentsOneByOne) {
  ModelConfig c = small(false);
  c.rope_theta = 500000;
  c.rope_scaling = {"llama3", 32, 1, 4, 8};
  const int T = 12;
  // One row: documents [0, 5), [5, 6), [6, 12).
  const std::vector<int> bounds = {0, 5, 6, 12};
  std::vector<int32_t> tokens(T), targets(T), starts(T);
  for (int t = 0; t < T; ++t) tokens[t] = int32_t((t * 7 + 3) % 50), targets[t] = int32_t((t * 11 + 1) % 50);
  for (size_t k = 0; k + 1 < bounds.size(); ++k)
    for (int t = bounds[k]; t < bounds[k + 1]; ++t) starts[t] = bounds[k];

  Llama packed(c), alone(c);
  packed.init(5);
  alone.init(5);
  const double packed_sum = packed.forward(tokens.data(), targets.data(), 1, T, starts.data()) * T;
  packed.zero_grads();
  packed.backward(1.0f);
  alone.zero_grads();
  double alone_sum = 0;
  for (size_t k = 0; k + 1 < bounds.size(); ++k) {
    const int s = bounds[k], L = bounds[k + 1] - s;
    alone_sum += alone.forward(tokens.data() + s, targets.data() + s, 1, L) * L;
    alone.backward(1.0f);  // accumulates over the documents
  }
  EXPECT_NEAR(packed_sum, alone_sum, 1e-5 * std::fabs(alone_sum));
  double worst = 0;
  for (size_t i = 0; i < packed.params().size(); ++i) {
    const Tensor a = packed.grad(int(i)), b = alone.grad(int(i));
    double diff = 0, norm = 0;
    for (int64_t j = 0; j < a.numel(); ++j) {
      diff += std::pow(double(a.f32()[j]) - b.f32()[j], 2);
      norm += std::pow(double(b.f32()[j]), 2);
    }
    worst = std::max(worst, std::sqrt(diff / std::max(norm, 1e-30)));
  }
  EXPECT_LT(worst, 1e-5);
  // Without the starts the row is one sequence: another loss.
  const double whole = packed.forward(tokens.data(), targets.data(), 1, T) * T;
  EXPECT_GT(std::fabs(whole - alone_sum), 1e-3);
}

// What a rank that keeps part of the model draws: any range of the flat
// layout, across tensor boundaries and in any order, is exactly init's.
TEST(InitialWeights, AnyRangeIsWhatInitDraws) {
  Llama m(small(false));
  m.init(7);
  const float* all = m.flat_params().f32();
  const InitialWeights src(small(false), 7);
  const int64_t n = m.num_params();
  const std::pair<int64_t, int64_t> ranges[] = {{n - 100, n}, {0, n}, {30, 1700}, {1000, 1001}, {5, 5}};
  for (const auto& [b, e] : ranges) {
    std::vector<float> got(static_cast<size_t>(e - b));
    src.read(b, Tensor::f32(got.data(), {e - b}));
    for (int64_t i = b; i < e; ++i) ASSERT_EQ(got[i - b], all[i]) << "element " << i << " of [" << b << ", " << e << ")";
  }
  std::vector<float> past(10);
  EXPECT_DEATH(src.read(n - 5, Tensor::f32(past.data(), {10})), "extends past the model");
}

struct Tokens {
  std::vector<int32_t> in, tgt;
  int B = 3, T = 9;
  Tokens() {
    for (int i = 0; i < B * T; ++i) {
      in.push_back((i * 7 + 3) % 50);
      tgt.push_back((i * 11 + 5) % 50);
    }
  }
};

TEST(LlamaBackward, ReportsEveryParameterOnceInLayoutOrder) {
  for (bool tied : {false, true}) {
    Llama m(small(tied));
    m.init(1);
    Tokens r;
    m.forward(r.in.data(), r.tgt.data(), r.B, r.T);
    std::vector<int> order;
    m.backward(1.0f, [&](int i) { order.push_back(i); });
    ASSERT_EQ(order.size(), m.params().size()) << "tied=" << tied;
    for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<int>(i));
  }
}

TEST(LlamaBackward, GradientsAccumulateAcrossMicroBatches) {
  Llama m(small(false));
  m.init(2);
  Tokens r;
  m.forward(r.in.data(), r.tgt.data(), r.B, r.T);
  m.zero_grads();
  m.backward(0.5f);
  Tensor g = m.flat_grads();
  std::vector<float> once(g.f32(), g.f32() + g.numel());
  m.forward(r.in.data(), r.tgt.data(), r.B, r.T);
  m.backward(0.5f);
  double max_rel = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (std::fabs(once[i]) > 1e-6)
      max_rel = std::max(max_rel, std::fabs(g.f32()[i] / (2 * once[i]) - 1.0));
  }
  EXPECT_LT(max_rel, 1e-5);
}

// Blocks that recompute their activations in backward reach exactly the
// gradients of a model that kept them, with less activation memory, and still
// report every parameter once in layout order.
TEST(LlamaBackward, RecomputedBlocksGiveIdenticalGradients) {
  Tokens r;
  Llama keep(small(false));
  keep.init(3);
  const double loss = keep.forward(r.in.data(), r.tgt.data(), r.B, r.T);
  keep.zero_grads();
  keep.backward(0.25f);
  for (int n : {1, 2}) {
    Llama m(small(false));
    m.init(3);
    m.set_recompute_blocks(n);
    EXPECT_EQ(m.forward(r.in.data(), r.tgt.data(), r.B, r.T), loss);
    // One shared set for the recomputed blocks: less memory from the second on.
    if (n == 2) {
      EXPECT_LT(m.activation_bytes(), keep.activation_bytes());
    }
    m.zero_grads();
    std::vector<int> order;
    m.backward(0.25f, [&](int i) { order.push_back(i); });
    ASSERT_EQ(order.size(), m.params().size());
    for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<int>(i));
    Tensor a = keep.flat_grads(), b = m.flat_grads();
    for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.f32()[i], b.f32()[i]) << n << " recomputed, element " << i;
  }
}

// Norm outputs and SwiGLU products formed again in backward instead of kept
// give bit-identical losses and gradients (the same kernels on the same
// inputs), in f32 and bf16, alone, with recomputed blocks and with chunked
// logits, in [B*T, 2 d + ffn] less memory per block beyond a shared scratch.
TEST(LlamaBackward, PointwiseRecomputeGivesIdenticalLossAndGradients) {
  Tokens r;
  ModelConfig cfg = small(false);
  cfg.n_layers = 3;
  for (DType dt : {DType::F32, DType::BF16})
    for (int blocks : {0, 1}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + ", " + std::to_string(blocks) + " recomputed blocks");
      auto model = [&] {
        auto m = std::make_unique<Llama>(cfg, std::make_shared<ParamAndGradBuffer>(llama_param_table(cfg), dt));
        Llama f32(cfg);
        f32.init(9);
        assign(m->flat_params(), f32.flat_params());
        m->set_recompute_blocks(blocks);
        return m;
      };
      auto keep = model();
      const double loss = keep->forward(r.in.data(), r.tgt.data(), r.B, r.T);
      keep->zero_grads();
      keep->backward(0.25f);
      for (int64_t chunk : {int64_t{0}, int64_t{7}}) {
        auto m = model();
        m->set_recompute_pointwise(true);
        m->set_logits_chunk_rows(chunk);
        keep->set_logits_chunk_rows(chunk);
        if (chunk == 0) {
          const int64_t N = int64_t(r.B) * r.T, C = cfg.d_model, F = cfg.ffn();
          // Blocks holding their own activations, and the recomputed blocks' shared set.
          const int64_t kept = cfg.n_layers - blocks + (blocks > 0 ? 1 : 0);
          const int64_t saved = (kept * (2 * C + F) - (C + F)) * N * int64_t(dtype_size(dt));
          EXPECT_EQ(m->forward(r.in.data(), r.tgt.data(), r.B, r.T), loss);
          EXPECT_EQ(static_cast<int64_t>(keep->activation_bytes() - m->activation_bytes()), saved);
        } else {
          m->forward(r.in.data(), r.tgt.data(), r.B, r.T);
        }
        m->zero_grads();
        std::vector<int> order;
        m->backward(0.25f, [&](int i) { order.push_back(i); });
        ASSERT_EQ(order.size(), m->params().size());
        for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<int>(i));
        if (chunk != 0) {  // the reference: the same chunks, activations kept
          keep->forward(r.in.data(), r.tgt.data(), r.B, r.T);
          keep->zero_grads();
          keep->backward(0.25f);
        }
        Tensor a = keep->flat_grads(), b = m->flat_grads();
        for (int64_t i = 0; i < a.numel(); ++i)
          ASSERT_EQ(a.f32()[i], b.f32()[i]) << "chunk " << chunk << ", element " << i;
      }
    }
}

// Logits computed a few rows at a time (and again in backward) give the
// loss and gradients of the whole [B*T, vocab] at once, tied or not, f32 or
// bf16 working weights, with a [rows, vocab] buffer only; parameters are
// still reported once each in layout order.
TEST(LlamaBackward, ChunkedLogitsGiveTheWholeMicroBatchsLossAndGradients) {
  Tokens r;
  for (DType dt : {DType::F32, DType::BF16})
    for (bool tied : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (tied ? " tied" : " untied"));  // the matmuls of fewer rows may sum in another order: 1e-7
      auto model = [&] {
        auto m = std::make_unique<Llama>(small(tied), std::make_shared<ParamAndGradBuffer>(
                                                          llama_param_table(small(tied)), dt));
        Llama f32(small(tied));  // init draws f32; bf16 weights are its rounding
        f32.init(5);
        assign(m->flat_params(), f32.flat_params());
        return m;
      };
      auto whole = model();
      const double loss = whole->forward(r.in.data(), r.tgt.data(), r.B, r.T);
      whole->zero_grads();
      whole->backward(0.25f);
      for (int64_t rows : {1, 5, 16, 1000}) {
        SCOPED_TRACE(std::to_string(rows) + " rows");
        auto m = model();
        m->set_logits_chunk_rows(rows);
        const double l = m->forward(r.in.data(), r.tgt.data(), r.B, r.T);
        EXPECT_NEAR(l, loss, 1e-7 * loss);
        EXPECT_EQ(m->logits().dim(0), std::min<int64_t>(rows, int64_t(r.B) * r.T));
        if (rows < int64_t(r.B) * r.T) {
          EXPECT_LT(m->activation_bytes(), whole->activation_bytes());
        }
        m->zero_grads();
        std::vector<int> order;
        m->backward(0.25f, [&](int i) { order.push_back(i); });
        ASSERT_EQ(order.size(), m->params().size());
        for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<int>(i));
        Tensor a = whole->flat_grads(), b = m->flat_grads();
        double worst = 0, scale = 0;
        for (int64_t i = 0; i < a.numel(); ++i) scale = std::max(scale, double(std::fabs(a.f32()[i])));
        for (int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, double(std::fabs(a.f32()[i] - b.f32()[i])));
        EXPECT_LE(worst, 1e-6 * scale) << "largest gradient " << scale;
      }
    }
}

TEST(LlamaForward, InitialLossIsNearUniformAndDeterministic) {
  ModelConfig cfg = small(false);
  cfg.init_std = 0.02;
  Llama a(cfg), b(cfg);
  a.init(7);
  b.init(7);
  Tokens r;
  double la = a.forward(r.in.data(), r.tgt.data(), r.B, r.T);
  double lb = b.forward(r.in.data(), r.tgt.data(), r.B, r.T);
  EXPECT_EQ(la, lb);
  EXPECT_NEAR(la, std::log(50.0), 0.05);
  Llama c(cfg);
  c.init(8);
  EXPECT_NE(la, c.forward(r.in.data(), r.tgt.data(), r.B, r.T));
}

}  // namespace
}  // namespace weft
