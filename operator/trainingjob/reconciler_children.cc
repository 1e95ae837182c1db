// Applying the difference to a job's children: the Service, ConfigMap,
// NetworkPolicy and Secret, and the gang's pods (slow-start creation, guarded deletion, live
// reads of the gang when the cache cannot be trusted).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "trainingjob/builders.h"
#include "trainingjob/constants.h"
#include "trainingjob/reconciler.h"
#include "trainingjob/reconciler_context.h"
#include "trainingjob/scheduling_policy.h"
#include "trainingjob/worker_config.h"
#include "weft_contract.h"

namespace weft::tj {
using kube::ApiError;
using kube::ObjectPtr;
using namespace detail;

namespace {

// A child or pod of this job's name that another owner holds: usually one
// of a deleted job with the same name that the garbage collector has not
// removed yet. Transient (Conflict): retried until it is gone.
ApiError not_owned(const std::string& kind, const std::string& ns, const std::string& name) {
  return ApiError{409, "Conflict", kind + " " + ns + "/" + name + " exists but is not owned by this job"};
}

}  // namespace

// Slow start, like Kubernetes' Job controller but steeper: 1 create, then 8
// at once, then a window of 32 in flight (a new create starts as soon as any
// returns), stopping once a create failed. A namespace quota or an admission
// webhook that rejects every pod costs one call, not 256; a quota that admits
// only part of the gang wastes at most 32. Batches of 32 each waited for
// their slowest create; the window keeps 32 in flight throughout, so above
// the client limit the API server's latency, not its slowest answers, sets
// the pace (1 024 pods in 6.5 s at --qps 200: docs/benchmarks/operator-scale.md).
// Created (or already existing) ranks join cx.gang and cx.present.
int Reconciler::create_pods(Context& cx, const std::vector<int>& ranks) {
  // The pods read the token from the Secret; one deleted since the last
  // launch would leave them unable to start.
  if (!ranks.empty() && !ensure_secret(cx)) return 0;
  // A gang scheduler holds the pods until all of them fit: its PodGroup
  // must exist before the first pod, or that pod is placed on its own.
  if (!ranks.empty() && cx.spec.scheduling.enabled() && !ensure_podgroup(cx)) return 0;
  constexpr size_t kWindow = 32;
  int created = 0, rounds = 0;
  size_t next = 0;
  bool failed = false;
  const auto t0 = std::chrono::steady_clock::now();
  // Creates ranks[from, to) with at most `width` in flight; results in order.
  auto create_range = [&](size_t from, size_t to, size_t width) {
    std::vector<std::optional<kube::Result<Json>>> results(to - from);
    std::atomic<size_t> cursor{from};
    std::atomic<bool> stop{false};
    auto work = [&] {
      for (size_t i = cursor++; i < to && !stop; i = cursor++) {
        auto res = api_.create(kube::kPods, cx.ns, build_pod(*cx.job, cx.spec, ranks[i], cx.status.attempt));
        if (!res && !res.error().already_exists()) stop = true;
        results[i - from] = std::move(res);
      }
    };
    {
      std::vector<std::jthread> helpers;
      for (size_t w = 1; w < std::min(width, to - from); ++w) helpers.emplace_back(work);
      work();
    }
    for (size_t i = from; i < to; ++i) {
      auto& res = results[i - from];
      if (!res) continue;  // not started: a create before it failed
      if (*res) {
        ++created;
        cx.gang.ranks.push_back(observe_pod(**res, kContainerName));
        cx.present.insert(ranks[i]);
      } else if (res->error().already_exists()) {
        if (pod_there_is_current(cx, ranks[i])) cx.present.insert(ranks[i]);
      } else {
        cx.note(res->error());
        failed = true;
      }
    }
  };
  for (size_t width : {size_t{1}, size_t{8}, kWindow}) {
    if (next >= ranks.size() || failed) break;
    const size_t to = width == kWindow ? ranks.size() : std::min(ranks.size(), next + width);
    ++rounds;
    create_range(next, to, width);
    next = to;
  }
  if (!ranks.empty())
    spdlog::debug("{}/{}: created {} of {} pods in {} rounds, {:.0f} ms", cx.ns, cx.name, created, ranks.size(), rounds,
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return created;
}

// A create answered AlreadyExists: our cache is behind. The pod there is
// this attempt's (the rank is present), or an older attempt's that the cache
// never showed us, which finish() deletes (Context::changes, with its uid as
// precondition) and whose rank a later reconcile creates. Taking every such pod for this attempt's once launched a gang
// with a stale rank in it, which the next reconcile deleted and took for a
// rank lost.
bool Reconciler::pod_there_is_current(Context& cx, int rank) {
  const std::string name = pod_name(cx.name, rank);
  auto live = api_.get(kube::kPods, cx.ns, name);
  if (!live) {
    if (!live.error().not_found()) cx.note(live.error());
    return false;  // gone since: created again by the next reconcile
  }
  if (!owned_by(*live, (*cx.job)["metadata"].value("uid", ""))) {
    cx.note(not_owned(kube::kPods.kind, cx.ns, name));
    return false;
  }
  if (label_int(*live, kLabelAttempt, -1) == cx.status.attempt) return true;
  if (!terminating(*live)) cx.delete_pods({std::make_shared<const Json>(std::move(*live))});
  return false;
}

bool Reconciler::ensure_children(Context& cx) {
  const Json& job = *cx.job;
  const std::string uid = job["metadata"].value("uid", "");
  // The children a new job lacks are created concurrently: one round trip
  // before the pods, not four.
  struct Creating {
    bool* already_there;  // set on AlreadyExists, for the children whose content is kept up to date
    std::future<kube::Result<Json>> created;
  };
  std::vector<Creating> creating;
  auto ensure = [&](kube::Informer& cache, const kube::Resource& res, const std::string& name, bool* already_there,
                    auto build) -> ObjectPtr {
    ObjectPtr have = cache.get(cx.ns, name);
    if (have) {
      if (owned_by(*have, uid)) return have;
      cx.note(not_owned(res.kind, cx.ns, name));
      return nullptr;
    }
    creating.push_back({already_there, std::async(std::launch::async, [this, &res, &cx, obj = build()] {
                          return api_.create(res, cx.ns, obj);
                        })});
    return nullptr;
  };
  bool cm_there = false, policy_there = false;
  ensure(caches_.services, kube::kServices, service_name(cx.name), nullptr, [&] { return build_service(job, cx.spec); });
  ObjectPtr cm = ensure(caches_.configmaps, kube::kConfigMaps, configmap_name(cx.name), &cm_there,
                        [&] { return build_configmap(job, cx.spec); });
  ObjectPtr policy;
  if (caches_.network_policies)
    policy = ensure(*caches_.network_policies, kube::kNetworkPolicies, network_policy_name(cx.name), &policy_there,
                    [&] { return build_network_policy(job, cx.spec, metrics_from_); });
  // The Secret is not cached (the operator may not read Secrets): it is
  // created with the other children of a new job, and again before each
  // launch of a gang (create_pods), where AlreadyExists is the usual answer.
  std::future<kube::Result<Json>> secret;
  if (!creating.empty())
    secret = std::async(std::launch::async, [this, &cx, obj = build_secret(job, random_token())] {
      return api_.create(kube::kSecrets, cx.ns, obj);
    });
  for (auto& c : creating) {
    auto created = c.created.get();
    if (created) continue;  // built from this spec
    if (!created.error().already_exists()) cx.note(created.error());
    else if (c.already_there) *c.already_there = true;
  }
  if (secret.valid()) {
    auto created = secret.get();
    if (created || created.error().already_exists())
      cx.secret_ensured = true;
    else
      cx.note(created.error());
  }
  // A child there already but unseen by our watch (which lags behind our own
  // create of a moment ago, e.g. when the spec changes right after the job
  // was created) may hold an older spec's content: it is read live and
  // brought up to date below like a cached one. Taking it as current once
  // relaunched a gang on the previous spec.worker's config.
  auto read_live = [&](kube::Result<Json> live, const kube::Resource& res, const std::string& name) -> ObjectPtr {
    if (!live) {
      cx.note(live.error());
      return nullptr;
    }
    if (!owned_by(*live, uid)) {
      cx.note(not_owned(res.kind, cx.ns, name));
      return nullptr;
    }
    return std::make_shared<const Json>(std::move(*live));
  };
  if (cm_there)
    cm = read_live(api_.get(kube::kConfigMaps, cx.ns, configmap_name(cx.name)), kube::kConfigMaps,
                   configmap_name(cx.name));
  if (policy_there)
    policy = read_live(api_.get(kube::kNetworkPolicies, cx.ns, network_policy_name(cx.name)),
                       kube::kNetworkPolicies, network_policy_name(cx.name));
  if (cm) {
    // spec.worker may change between attempts; bucket_cap_mb is the tuner's.
    const std::string want = worker_config_yaml(cx.spec.worker);
    const Json& data = (*cm).contains("data") ? (*cm)["data"] : Json::object();
    if (data.value(contract::kConfigKey, "") != want) {
      auto res = api_.merge_patch(kube::kConfigMaps, cx.ns, configmap_name(cx.name),
                                  {{"data", {{contract::kConfigKey, want}}}});
      if (!res) cx.note(res.error());
    }
  }
  if (policy) {
    // The metrics port (spec.worker) or the operator's metrics peers may change.
    const Json want = build_network_policy(job, cx.spec, metrics_from_)["spec"];
    if (!policy->contains("spec") || (*policy)["spec"] != want) {
      auto res = api_.merge_patch(kube::kNetworkPolicies, cx.ns, network_policy_name(cx.name), {{"spec", want}});
      if (!res) cx.note(res.error());
    }
  }
  return !cx.error;
}

bool Reconciler::ensure_secret(Context& cx) {
  if (cx.secret_ensured) return true;
  auto created = api_.create(kube::kSecrets, cx.ns, build_secret(*cx.job, random_token()));
  if (!created && !created.error().already_exists()) {
    cx.note(created.error());
    return false;
  }
  cx.secret_ensured = true;
  return true;
}

bool Reconciler::ensure_podgroup(Context& cx) {
  cx.podgroup_ensured = true;
  const Json want = build_podgroup(*cx.job, cx.spec);
  const std::string name = podgroup_name(cx.name);
  const bool volcano = cx.spec.scheduling.volcano();
  // Not cached: the PodGroup APIs exist only where a gang scheduler is
  // installed, and this runs once per launch of a gang.
  auto created = volcano ? api_.create(kube::kVolcanoPodGroups, cx.ns, want) : api_.create(kube::kPodGroups, cx.ns, want);
  if (created) return true;
  const ApiError& err = created.error();
  if (!err.already_exists()) {
    if (err.transient())
      cx.note(err);
    else
      cx.podgroup_problem = podgroup_problem(cx.spec, err.status, err.message);
    return false;
  }
  auto have = volcano ? api_.get(kube::kVolcanoPodGroups, cx.ns, name) : api_.get(kube::kPodGroups, cx.ns, name);
  if (!have) {
    cx.note(have.error());
    return false;
  }
  if (!owned_by(*have, (*cx.job)["metadata"].value("uid", ""))) {
    cx.podgroup_problem = "PodGroup " + cx.ns + "/" + name + " exists but is not this job's; the operator creates "
                          "its own, and any pods missing, once it is gone";
    return false;
  }
  // The job's replicas or scheduling fields may have changed since it was
  // made: set what differs, drop what the job no longer asks for (Volcano
  // defaults an absent queue to "default").
  const Json& have_spec = have->contains("spec") ? (*have)["spec"] : Json::object();
  Json patch = Json::object();
  for (auto it = want["spec"].begin(); it != want["spec"].end(); ++it)
    if (!have_spec.contains(it.key()) || have_spec[it.key()] != it.value()) patch[it.key()] = it.value();
  for (const char* key : {"minResources", "scheduleTimeoutSeconds", "priorityClassName", "queue"})
    if (have_spec.contains(key) && !want["spec"].contains(key) &&
        !(std::string(key) == "queue" && have_spec[key] == "default"))
      patch[key] = nullptr;
  if (patch.empty()) return true;
  auto patched = volcano ? api_.merge_patch(kube::kVolcanoPodGroups, cx.ns, name, {{"spec", patch}})
                         : api_.merge_patch(kube::kPodGroups, cx.ns, name, {{"spec", patch}});
  if (!patched) {
    cx.note(patched.error());
    return false;
  }
  return true;
}

void Reconciler::remove_podgroup(Context& cx) {
  if (!cx.spec.scheduling.enabled()) return;
  const std::string name = podgroup_name(cx.name);
  // A failed delete leaves it to the garbage collector, which removes it
  // with the job (its owner).
  auto res = cx.spec.scheduling.volcano()
                 ? api_.remove(kube::kVolcanoPodGroups, cx.ns, name, kube::Propagation::Background)
                 : api_.remove(kube::kPodGroups, cx.ns, name, kube::Propagation::Background);
  if (!res && !res.error().not_found())
    spdlog::warn("{}: deleting PodGroup {}: {} (the garbage collector removes it with the job)", cx.key(), name,
                 res.error().message);
}

void Reconciler::remove_unwanted_podgroups(Context& cx) {
  const SchedulingSpec& g = cx.spec.scheduling;
  const std::string name = podgroup_name(cx.name);
  for (const kube::Resource* res : {&kube::kPodGroups, &kube::kVolcanoPodGroups}) {
    if (g.enabled() && res == &podgroup_resource(cx.spec)) continue;
    // Not found is the usual answer (also where the API is not served). A
    // PodGroup of that name that is not this job's is left alone.
    auto have = api_.get(*res, cx.ns, name);
    if (!have || !owned_by(*have, (*cx.job)["metadata"].value("uid", ""))) continue;
    auto gone = api_.remove(*res, cx.ns, name, kube::Propagation::Background,
                            (*have)["metadata"].value("uid", ""));
    if (!gone && !gone.error().not_found() && gone.error().status != 409)
      spdlog::warn("{}: deleting the {} PodGroup the spec no longer asks for: {} (the garbage collector removes it "
                   "with the job)",
                   cx.key(), res->group, gone.error().message);
  }
}

void Reconciler::keep_podgroup_while_waiting(Context& cx) {
  if (!cx.spec.scheduling.enabled() || cx.podgroup_ensured) return;
  if (static_cast<int>(cx.present.size()) < cx.spec.replicas) return;  // not launched: create_pods ensures it
  int placed = 0;
  for (const RankState& r : cx.gang.ranks)
    if (r.scheduled && !r.terminating) ++placed;
  if (placed >= cx.spec.replicas) return;  // bound: the scheduler is done with it until the next launch
  // Looked after in this reconcile (report_progress looks again in 30 s);
  // finish() creates or patches it.
  cx.podgroup_ensured = true;
  cx.changes.keep_podgroup = true;
}

void Reconciler::remove_pods(Context& cx, const std::vector<ObjectPtr>& pods, bool as_cached) {
  std::set<std::string> done;  // two steps may ask for the same pod
  for (const auto& p : pods) {
    const Json& meta = (*p)["metadata"];
    if (!done.insert(meta.value("uid", "") + "/" + meta.value("name", "")).second) continue;
    auto res = api_.remove(kube::kPods, cx.ns, meta.value("name", ""), kube::Propagation::Background,
                           meta.value("uid", ""), -1, as_cached ? meta.value("resourceVersion", "") : "");
    // NotFound: already gone. Conflict on the uid precondition: a newer pod
    // with that name exists, which is not ours to delete; on the
    // resourceVersion one: the pod changed, and its watch event brings the
    // reconcile that judges it again.
    if (!res && !res.error().not_found() && res.error().status != 409) cx.note(res.error());
  }
}

bool Reconciler::cache_shows_full_gang(const Context& cx) const {
  std::set<int> ranks;
  for (const auto& p : cx.pods)
    if (!terminating(*p) && label_int(*p, kLabelAttempt, -1) == cx.status.attempt)
      ranks.insert(label_int(*p, kLabelRank, -1));
  for (int r = 0; r < cx.spec.replicas; ++r)
    if (!ranks.count(r)) return false;
  return true;
}

bool Reconciler::refresh_pods_live(Context& cx) {
  // Rare (a rank vanished, or our watch lags behind our own creates), so one
  // list call here is cheaper than any bookkeeping that could go stale.
  kube::ListOptions opts;
  opts.label_selector = std::string(kLabelJob) + "=" + cx.name;
  auto live = api_.list(kube::kPods, cx.ns, opts);
  if (!live) {
    cx.note(live.error());
    return false;
  }
  const std::string uid = (*cx.job)["metadata"].value("uid", "");
  cx.pods.clear();
  for (auto& pod : live->items)
    if (owned_by(pod, uid)) cx.pods.push_back(std::make_shared<const Json>(std::move(pod)));
  return true;
}

void Reconciler::write_bucket_cap(Context& cx, const std::string& mb) {
  kube::ObjectPtr cm = caches_.configmaps.get(cx.ns, configmap_name(cx.name));
  if (cm && (*cm).contains("data") && (*cm)["data"].value(contract::kBucketCapKey, "") == mb) return;
  auto res = api_.merge_patch(kube::kConfigMaps, cx.ns, configmap_name(cx.name), {{"data", {{contract::kBucketCapKey, mb}}}});
  if (res) spdlog::info("{}: bucket cap {} MiB written to the ConfigMap", cx.key(), mb);
  else cx.note(res.error());  // retried: status says what the ConfigMap must hold
}

}  // namespace weft::tj
