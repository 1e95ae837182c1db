// ParamAndGradBuffer: flat layout in the working dtype with f32 gradients,
// shared between the model and the strategies, and the per-layer weight hook
// the model calls before it uses a layer's weights.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "model/llama.h"
#include "model/param_and_grad_buffer.h"

namespace weft {
namespace {

ModelConfig tiny() {
  ModelConfig m;
  m.vocab_size = 20;
  m.d_model = 16;
  m.n_layers = 3;
  m.n_heads = 2;
  m.n_kv_heads = 1;
  m.ffn_hidden = 32;
  m.max_seq_len = 8;
  m.init_std = 0.1;
  return m;
}

struct Recorder : WeightHook {
  std::vector<std::pair<int, WeightUse>> calls;
  void before_use(int layer, WeightUse use) override { calls.emplace_back(layer, use); }
};

TEST(ParamAndGradBuffer, ViewsFollowTheTableInBothDtypes) {
  const auto table = llama_param_table(tiny());
  for (DType dt : {DType::F32, DType::BF16}) {
    ParamAndGradBuffer b(table, dt);
    const int64_t n = table.back().offset + table.back().numel;
    EXPECT_EQ(b.numel(), n);
    EXPECT_EQ(b.param_bytes(), size_t(n) * dtype_size(dt));
    EXPECT_EQ(b.grad_bytes(), size_t(n) * 4);
    EXPECT_EQ(b.flat_params().dtype, dt);
    EXPECT_EQ(b.flat_grads().dtype, DType::F32);
    const int q = b.find("model.layers.1.self_attn.q_proj.weight");
    ASSERT_GE(q, 0);
    EXPECT_EQ(b.params()[q].layer, 1);
    EXPECT_EQ(b.param(q).shape, table[q].shape);
    EXPECT_EQ(static_cast<char*>(b.param(q).data) - static_cast<char*>(b.flat_params().data),
              table[q].offset * int64_t(dtype_size(dt)));
    EXPECT_EQ(b.grad(q).f32() - b.flat_grads().f32(), table[q].offset);
    EXPECT_EQ(b.find("no.such.weight"), -1);
  }
  EXPECT_EQ(table.front().layer, kHeadLayer);
  EXPECT_EQ(table.back().layer, kEmbeddingLayer);
}

TEST(ParamAndGradBuffer, ModelSharesTheBufferAndCallsTheHookPerLayer) {
  const ModelConfig cfg = tiny();
  auto buf = std::make_shared<ParamAndGradBuffer>(llama_param_table(cfg));
  Llama model(cfg, buf);
  model.init(1);
  EXPECT_EQ(model.flat_params().data, buf->flat_params().data);
  Recorder rec;
  buf->set_weight_hook(&rec);
  std::vector<int32_t> tok = {1, 2, 3, 4, 5, 6}, tgt = {2, 3, 4, 5, 6, 7};
  model.forward(tok.data(), tgt.data(), 2, 3);
  model.backward(1.0f / 6);
  using U = WeightUse;
  const std::vector<std::pair<int, WeightUse>> want = {
      {kEmbeddingLayer, U::Forward}, {0, U::Forward},  {1, U::Forward}, {2, U::Forward},
      {kHeadLayer, U::Forward},      {kHeadLayer, U::Backward}, {2, U::Backward},
      {1, U::Backward},              {0, U::Backward}, {kEmbeddingLayer, U::Backward}};
  EXPECT_EQ(rec.calls, want);
  buf->set_weight_hook(nullptr);
  model.forward(tok.data(), tgt.data(), 2, 3);
  EXPECT_EQ(rec.calls.size(), want.size());
}

TEST(ParamAndGradBuffer, RejectsMismatchedModelAndNonFloatDtypes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const ModelConfig cfg = tiny();
  ModelConfig other = cfg;
  other.n_layers = 2;
  EXPECT_DEATH(Llama(cfg, std::make_shared<ParamAndGradBuffer>(llama_param_table(other))),
               "does not hold this model's parameter table");
  EXPECT_DEATH(ParamAndGradBuffer(llama_param_table(cfg), DType::I32), "parameters must be f32 or bf16");
}

}  // namespace
}  // namespace weft
