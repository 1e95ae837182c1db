#include "trainingjob/progress.h"

#include <cmath>
#include <sstream>

#include "weft_contract.h"
#include "weft_metrics.h"

namespace weft::tj {

namespace cm = contract::metrics;

std::optional<Progress> progress_from_metrics(const scrape::Exposition& m) {
  const scrape::Labels rank0 = {{cm::kLabelRank, "0"}};
  auto step = m.value(cm::kStep.name, rank0);
  if (!step) return std::nullopt;
  Progress p;
  p.step = static_cast<long>(*step);
  p.loss = m.value(cm::kLoss.name, rank0).value_or(0);
  if (m.value(cm::kEvalStep.name, rank0).value_or(0) > 0) p.eval_loss = m.value(cm::kEvalLoss.name, rank0);
  p.tokens_per_second = m.value(cm::kTokensPerSecond.name, rank0).value_or(0);
  p.overlap_ratio = m.value(cm::kOverlapRatio.name, rank0).value_or(0);
  p.exposed_comm_seconds = m.value(cm::kExposedCommLastStep.name, rank0);
  if (auto cap = m.value(cm::kBucketCapBytes.name, rank0); cap && *cap > 0) p.bucket_cap_mb = *cap / (1024.0 * 1024.0);
  return p;
}

std::string not_this_rank(const scrape::Exposition& m, const std::string& uid, int attempt, int pod_index) {
  const auto info = m.find(cm::kRankInfo.name);
  if (info.empty())
    return std::string("it exports no ") + cm::kRankInfo.name + " (not a weft rank, or one from before weft 0.1)";
  auto label = [](const scrape::Sample* s, const char* key) {
    const std::string* v = s->label(key);
    return v ? *v : std::string();
  };
  const scrape::Sample* s = info.front();
  const std::string got_uid = label(s, cm::kLabelInfoJobUid), got_attempt = label(s, cm::kLabelInfoAttempt),
                    got_pod = label(s, cm::kLabelInfoNodeRank), got_local = label(s, cm::kLabelInfoLocalRank);
  if (got_uid == uid && got_attempt == std::to_string(attempt) && got_pod == std::to_string(pod_index) &&
      got_local == "0")
    return "";
  return "it is " + (got_uid.empty() ? std::string("no TrainingJob's rank") : "job uid " + got_uid) + ", attempt " +
         got_attempt + ", pod " + got_pod + ", local rank " + got_local + " (wanted uid " + uid + ", attempt " +
         std::to_string(attempt) + ", pod " + std::to_string(pod_index) + ", local rank 0)";
}

std::optional<Progress> progress_from_termination_message(const std::string& message) {
  std::istringstream in(message);
  const std::string prefix = contract::kProgressLinePrefix;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    const nlohmann::json j = nlohmann::json::parse(line.substr(prefix.size()), nullptr, false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) return std::nullopt;
    auto num = [&](const char* key) {
      auto it = j.find(key);
      return it != j.end() && it->is_number() ? it->get<double>() : std::nan("");
    };
    Progress p;
    p.step = j["step"].get<long>();
    p.loss = num("loss");  // null (a diverged loss) stays non-finite, written as null
    if (j.contains("evalLoss")) p.eval_loss = num("evalLoss");
    p.tokens_per_second = num("tokensPerSecond");
    p.overlap_ratio = num("overlapRatio");
    return p;
  }
  return std::nullopt;
}

nlohmann::json progress_json(const Progress& p, const std::string& now) {
  // Rounded to what a reader of `kubectl get tj` can use (the printer
  // columns show the stored number whole): loss to 4 decimals, tokens/s to a
  // whole token, the overlap ratio to 3 decimals. The exact values stay on
  // rank 0's /metrics.
  auto num = [](double v, double scale) {
    return std::isfinite(v) ? nlohmann::json(std::round(v * scale) / scale) : nlohmann::json(nullptr);
  };
  nlohmann::json j = {{"step", p.step},
                      {"loss", num(p.loss, 1e4)},
                      {"tokensPerSecond", num(p.tokens_per_second, 1)},
                      {"overlapRatio", num(p.overlap_ratio, 1e3)},
                      {"updatedAt", now}};
  if (p.eval_loss) j["evalLoss"] = num(*p.eval_loss, 1e4);
  if (p.exposed_comm_seconds) j["exposedCommSeconds"] = num(*p.exposed_comm_seconds, 1e4);
  if (p.bucket_cap_mb) j["bucketCapMB"] = num(*p.bucket_cap_mb, 1e3);
  return j;
}

}  // namespace weft::tj
