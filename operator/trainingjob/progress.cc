#include "trainingjob/progress.h"

#include <cmath>

namespace weft::tj {

std::optional<Progress> progress_from_metrics(const scrape::Exposition& m) {
  const scrape::Labels rank0 = {{"rank", "0"}};
  auto step = m.value("weft_step", rank0);
  if (!step) return std::nullopt;
  Progress p;
  p.step = static_cast<long>(*step);
  p.loss = m.value("weft_loss", rank0).value_or(0);
  p.tokens_per_second = m.value("weft_tokens_per_second", rank0).value_or(0);
  p.overlap_ratio = m.value("weft_overlap_ratio", rank0).value_or(0);
  return p;
}

nlohmann::json progress_json(const Progress& p, const std::string& now) {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"step", p.step},
          {"loss", num(p.loss)},
          {"tokensPerSecond", num(p.tokens_per_second)},
          {"overlapRatio", num(p.overlap_ratio)},
          {"updatedAt", now}};
}

}  // namespace weft::tj
