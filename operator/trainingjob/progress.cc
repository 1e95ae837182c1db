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
  // Rounded to what a reader of `kubectl get tj` can use (the printer
  // columns show the stored number whole): loss to 4 decimals, tokens/s to a
  // whole token, the overlap ratio to 3 decimals. The exact values stay on
  // rank 0's /metrics.
  auto num = [](double v, double scale) {
    return std::isfinite(v) ? nlohmann::json(std::round(v * scale) / scale) : nlohmann::json(nullptr);
  };
  return {{"step", p.step},
          {"loss", num(p.loss, 1e4)},
          {"tokensPerSecond", num(p.tokens_per_second, 1)},
          {"overlapRatio", num(p.overlap_ratio, 1e3)},
          {"updatedAt", now}};
}

}  // namespace weft::tj
