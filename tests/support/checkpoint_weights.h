// Comparing the model weights that training runs wrote (header only; the
// including test links weft_train for SafetensorsFile).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "train/safetensors.h"

namespace weft::testing {

// model.safetensors of the checkpoint `latest` names under OUT/checkpoints.
inline SafetensorsFile final_weights(const std::filesystem::path& out) {
  std::ifstream latest(out / "checkpoints" / "latest");
  std::string name;
  latest >> name;
  return SafetensorsFile::load((out / "checkpoints" / name / "model.safetensors").string());
}

// Largest over tensors of ||a - b|| / ||a||.
inline double max_rel_diff(const SafetensorsFile& a, const SafetensorsFile& b) {
  double worst = 0;
  EXPECT_EQ(a.tensors().size(), b.tensors().size());
  for (const auto& [name, va] : a.tensors()) {
    const auto& vb = b.get(name, DType::F32, va.bytes / 4);
    const float* x = static_cast<const float*>(va.data);
    const float* y = static_cast<const float*>(vb.data);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < va.bytes / 4; ++i) {
      diff += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
      norm += double(x[i]) * x[i];
    }
    worst = std::max(worst, std::sqrt(diff / std::max(norm, 1e-30)));
  }
  return worst;
}

}  // namespace weft::testing
