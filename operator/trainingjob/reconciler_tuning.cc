// The reconciler's tuning step: hands the running gang to the bucket-size
// tuner (tuner/bucket_tuner.h) and applies what it returns — the ConfigMap
// key the workers poll, status.tuning, events. Kept apart from the reconcile
// flow so that the tuner is one call there.
#include <spdlog/spdlog.h>

#include "weft_contract.h"
#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "trainingjob/reconciler.h"
#include "trainingjob/reconciler_context.h"

namespace weft::tj {
using namespace detail;

ReconcileResult Reconciler::tune_bucket_size(Context& cx) {
  if (!cx.spec.bucket_tuning.enabled) return ReconcileResult::done();
  tuner::TuneRequest req;
  req.ns = cx.ns;
  req.name = cx.name;
  req.uid = (*cx.job)["metadata"].value("uid", "");
  req.attempt = cx.status.attempt;
  req.tuning = cx.spec.bucket_tuning;
  req.start_mb = cx.spec.bucket_cap_mb().value_or(0);  // 0: auto, the size the ranks report
  req.replicas = cx.spec.replicas;
  req.metrics_port = cx.spec.metrics_port();
  req.status = cx.status.tuning;
  for (const auto& p : cx.current) {
    if (terminating(*p) || !(*p).contains("status")) continue;
    const Json& ps = (*p)["status"];
    if (ps.value("phase", "") != "Running" || ps.value("podIP", "").empty()) continue;
    req.ranks.push_back({label_int(*p, kLabelRank, -1), ps.value("podIP", "")});
  }

  tuner::TuneResult r = tuner_.tune(req);
  if (r.write_mb) {
    const std::string want = tuner::format_mb(*r.write_mb);
    kube::ObjectPtr cm = caches_.configmaps.get(cx.ns, configmap_name(cx.name));
    const bool same = cm && (*cm).contains("data") && (*cm)["data"].value(contract::kBucketCapKey, "") == want;
    if (!same) {
      auto res = api_.merge_patch(kube::kConfigMaps, cx.ns, configmap_name(cx.name),
                                  {{"data", {{contract::kBucketCapKey, want}}}});
      if (res) spdlog::info("{}: bucket cap {} MiB written to the ConfigMap", cx.key(), want);
      else cx.note(res.error());  // retried: status says what the ConfigMap must hold
    }
  }
  if (r.status) cx.status.tuning = std::move(r.status);
  for (auto& e : r.events) cx.event(e.type, e.reason, e.message);
  return r.requeue_after ? ReconcileResult::requeue_after(*r.requeue_after) : ReconcileResult::done();
}

}  // namespace weft::tj
