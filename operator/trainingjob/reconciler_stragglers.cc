// The reconciler's straggler step (spec.stragglers): observe the scrape
// poller's window of every rank's pace (scrape_poller.h), decide with the
// pure straggler policy (straggler_policy.h), apply: condition Straggler, an
// event when a rank is named or cleared, the metric, and with action replace
// a relaunch of the gang with the straggler's node avoided. The ranks stop
// on SIGTERM at a step they agree on and checkpoint it, so the relaunch
// loses nothing.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "trainingjob/reconciler.h"
#include "trainingjob/reconciler_context.h"
#include "trainingjob/scrape_poller.h"
#include "trainingjob/straggler_policy.h"

namespace weft::tj {
using namespace detail;

namespace {

std::string node_of(const std::vector<kube::ObjectPtr>& pods, int rank) {
  for (const auto& p : pods)
    if (label_int(*p, kLabelRank, -1) == rank && (*p).contains("spec"))
      return (*p)["spec"].value("nodeName", "");
  return "";
}

}  // namespace

std::optional<ReconcileResult> Reconciler::name_stragglers(Context& cx) {
  if (!cx.spec.stragglers || !cx.scrape || !cx.figures) return std::nullopt;
  if (!cx.figures->pace_target.same_ranks(*cx.scrape)) return std::nullopt;  // another gang's window
  const StragglerSpec& spec = *cx.spec.stragglers;
  const StragglerVerdict v = judge_stragglers(cx.figures->pace, spec);
  if (!v.judged) return std::nullopt;
  {
    const auto slowest = std::max_element(v.ranks.begin(), v.ranks.end(), [](const RankPace& a, const RankPace& b) {
      return a.compute_per_step < b.compute_per_step;
    });
    spdlog::debug("{}: pace over {} steps: median compute {:.4f} s a step, slowest rank {} at {:.2f}x", cx.key(),
                  v.steps, v.median_compute, slowest->rank,
                  v.median_compute > 0 ? slowest->compute_per_step / v.median_compute : 0.0);
  }
  TrainingJobStatus& st = cx.status;
  const Condition* before = st.condition(kCondStraggler);
  const std::string pct = fmt::format("{:.0f}%", spec.threshold * 100);
  if (!v.straggler) {
    if (before && before->status == "False") return std::nullopt;  // figures in the message stay as first written
    const std::string msg = "every rank within " + pct + " of the gang's median compute time per step (" +
                            fmt::format("{:.3f} s", v.median_compute) + ") over the last " + std::to_string(v.steps) + " steps";
    st.set_condition(kCondStraggler, false, kReasonNoStraggler, msg, cx.generation, cx.now_s);
    if (before) cx.event("Normal", kReasonNoStraggler, msg);
    return std::nullopt;
  }
  const int rank = v.straggler->rank;
  const std::string pod = pod_name(cx.name, rank), node = node_of(cx.current, rank);
  const std::string who = "pod " + pod + " (rank " + std::to_string(rank) + ") on node " + (node.empty() ? "?" : node);
  // Named once per pod: its figures move with every round.
  if (before && before->status == "True" && before->message.rfind(who + " ", 0) == 0) return std::nullopt;
  const std::string msg =
      fmt::format("{} computes {:.3f} s a step over the last {} steps, {:.2f}x the gang's median {:.3f} s "
                  "(spec.stragglers.threshold {}); the other ranks wait for it in every collective",
                  who, v.straggler->compute_per_step, v.steps, v.ratio, v.median_compute, pct);
  st.set_condition(kCondStraggler, true, kReasonSlowRank, msg, cx.generation, cx.now_s);
  cx.event("Warning", kReasonSlowRank, msg);
  spdlog::info("{}: straggler: {}", cx.key(), msg);
  const bool replace = spec.replace() && !node.empty();
  if (metrics_) metrics_->add_straggler(replace);
  if (!replace) return std::nullopt;

  // Relaunch away from its node: the next attempt's pods may not go there.
  StragglerStatus& s = st.stragglers ? *st.stragglers : st.stragglers.emplace();
  if (std::find(s.avoided_nodes.begin(), s.avoided_nodes.end(), node) == s.avoided_nodes.end())
    s.avoided_nodes.push_back(node);
  ++s.replacements;
  cx.spec.avoid_nodes = s.avoided_nodes;
  relaunch_gang(cx);
  const std::string why = "spec.stragglers.action replace: relaunching the gang as attempt " +
                          std::to_string(st.attempt) + " with node " + node +
                          " avoided, from the checkpoint the ranks write as they stop";
  st.set_condition(kCondReady, false, kReasonStragglerReplaced, "gang relaunching away from " + node, cx.generation,
                   cx.now_s);
  cx.event("Normal", kReasonStragglerReplaced, why);
  spdlog::info("{}: {}", cx.key(), why);
  return finish(cx, ReconcileResult::requeue_after(std::chrono::seconds(1)));
}

}  // namespace weft::tj
