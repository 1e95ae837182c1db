#include "trainingjob/types.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kube/quantity.h"
#include "trainingjob/constants.h"
#include "weft_contract.h"
#include "weft_modes.h"

namespace weft::tj {
namespace {

// `v` as a T when it is a whole number T can hold; nullopt otherwise.
template <class T>
std::optional<T> whole_number(const Json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
    return static_cast<T>(u);
  }
  if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if (i < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
        i > static_cast<std::int64_t>(std::numeric_limits<T>::max()))
      return std::nullopt;
    return static_cast<T>(i);
  }
  return std::nullopt;
}

// Reads spec[key] as T if present; a present value of the wrong JSON type is
// reported instead of silently falling back to the default.
template <class T>
void read(const Json& obj, const char* key, T& out, const std::string& path, std::vector<SpecError>* errors) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return;
  // nlohmann's get<int>() casts without a check: 4294967298 would read as 2
  // and 2.5 as 2, a job other than the one asked for.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (auto n = whole_number<T>(*it)) {
      out = *n;
    } else if (errors) {
      errors->push_back({path + "." + key, it->is_number() ? "must be a whole number in range, got " + it->dump()
                                                           : "has the wrong type (" + std::string(it->type_name()) + ")"});
    }
    return;
  }
  try {
    out = it->get<T>();
  } catch (const Json::exception&) {
    if (errors) errors->push_back({path + "." + key, "has the wrong type (" + std::string(it->type_name()) + ")"});
  }
}

// spec.<key>: the object, or null when absent (or null); anything else is an
// error naming the field, and null.
const Json* section(const Json& spec, const char* key, std::vector<SpecError>* errors) {
  auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return nullptr;
  if (it->is_object()) return &*it;
  if (errors) errors->push_back({std::string("spec.") + key, "must be an object, got " + it->dump()});
  return nullptr;
}

// A DNS-1123 subdomain, the form of an object's name (a Volcano Queue's)
// and of a scheduler's: "-", "a..b" or "x-" pass a character check but not
// this, and a v1.20 API server takes them in a pod, which then waits forever.
bool dns_subdomain(const std::string& v) {
  if (v.empty() || v.size() > 253) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = v.find('.', start);
    const std::string label = v.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (label.empty() || label.front() == '-' || label.back() == '-' ||
        label.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
      return false;
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

}  // namespace

namespace {
// The config the ranks run, or the worker's defaults when it refuses spec.worker.
const WorkerConfig& worker_or_default(const TrainingJobSpec& s) {
  static const WorkerConfig defaults = preset("tiny");
  return s.worker_read.config ? *s.worker_read.config : defaults;
}
}  // namespace

int TrainingJobSpec::metrics_port() const { return worker_or_default(*this).metrics.port; }
long long TrainingJobSpec::sp() const { return worker_or_default(*this).parallel.sp; }
long long TrainingJobSpec::wp() const { return worker_or_default(*this).parallel.wp; }
std::optional<double> TrainingJobSpec::bucket_cap_mb() const {
  const double mb = worker_or_default(*this).parallel.bucket_cap_mb;
  if (mb == kAutoBucketCap) return std::nullopt;
  return mb;
}
long long TrainingJobSpec::grad_accum() const {
  return std::max<long long>(worker_or_default(*this).train.grad_accum, 1);
}

std::vector<int> TrainingJobSpec::elastic_sizes() const {
  const int full = planned();
  if (!elastic) return {full};
  const long long per_pod = ranks_per_pod(), planned_ranks = full * per_pod;
  const long long layout_sp = std::max(sp(), 1LL), layout_wp = std::max(wp(), 1LL);
  std::vector<int> sizes;
  for (int n = std::max(elastic->min_replicas, 1); n <= full; ++n) {
    const long long ranks = n * per_pod;
    if (ranks % layout_sp == 0 && ranks % layout_wp == 0 && (grad_accum() * planned_ranks) % ranks == 0)
      sizes.push_back(n);
  }
  return sizes;
}

std::optional<int> TrainingJobSpec::gpu_limit() const {
  auto l = resources.find("limits");
  if (l == resources.end() || !l->is_object()) return std::nullopt;
  auto g = l->find(kGpuResource);
  if (g == l->end()) return std::nullopt;
  const kube::Quantity q = kube::parse_quantity(*g);
  if (!q.ok || q.value < 0 || q.value > 1e6 || q.value != std::floor(q.value)) return std::nullopt;
  return static_cast<int>(q.value);
}

int TrainingJobSpec::ranks_per_pod() const {
  if (!procs_per_pod_auto) return procs_per_pod;
  const auto gpus = gpu_limit();
  return gpus && *gpus > 0 ? *gpus : 1;
}

std::string SchedulingSpec::scheduler() const {
  if (!scheduler_name.empty()) return scheduler_name;
  return volcano() ? kVolcanoScheduler : kSchedulerPluginsScheduler;
}

TrainingJobSpec parse_spec(const Json& spec, std::vector<SpecError>* errors) {
  TrainingJobSpec s;
  if (!spec.is_object()) {
    if (errors) errors->push_back({"spec", "is missing or not an object"});
    return s;
  }
  read(spec, "replicas", s.replicas, "spec", errors);
  if (auto p = spec.find("procsPerPod"); p != spec.end() && !p->is_null()) {
    if (p->is_string() && p->get<std::string>() == "auto")
      s.procs_per_pod_auto = true;
    else if (auto n = whole_number<int>(*p))
      s.procs_per_pod = *n;
    else if (errors)
      errors->push_back({"spec.procsPerPod", "must be a whole number of ranks in [1, " +
                                                 std::to_string(kMaxProcsPerPod) + "] or \"auto\", got " + p->dump()});
  }
  read(spec, "shmSize", s.shm_size, "spec", errors);
  read(spec, "image", s.image, "spec", errors);
  read(spec, "imagePullPolicy", s.image_pull_policy, "spec", errors);
  read(spec, "masterPort", s.master_port, "spec", errors);
  read(spec, "resources", s.resources, "spec", errors);
  read(spec, "template", s.pod_template, "spec", errors);
  read(spec, "worker", s.worker, "spec", errors);
  read(spec, "suspend", s.suspend, "spec", errors);
  if (spec.contains("ttlSecondsAfterFinished") && !spec["ttlSecondsAfterFinished"].is_null()) {
    int ttl = 0;
    read(spec, "ttlSecondsAfterFinished", ttl, "spec", errors);
    s.ttl_seconds_after_finished = ttl;
  }
  if (auto it = spec.find("restartPolicy"); it != spec.end() && it->is_object()) {
    read(*it, "maxRestarts", s.restart.max_restarts, "spec.restartPolicy", errors);
    read(*it, "backoffSeconds", s.restart.backoff_seconds, "spec.restartPolicy", errors);
    read(*it, "maxBackoffSeconds", s.restart.max_backoff_seconds, "spec.restartPolicy", errors);
  }
  if (const Json* g = section(spec, "scheduling", errors)) {
    const std::string path = "spec.scheduling";
    read(*g, "gang", s.scheduling.gang, path, errors);
    s.scheduling.provider_set = g->contains("provider") && !(*g)["provider"].is_null();
    read(*g, "provider", s.scheduling.provider, path, errors);
    read(*g, "schedulerName", s.scheduling.scheduler_name, path, errors);
    if (g->contains("scheduleTimeoutSeconds") && !(*g)["scheduleTimeoutSeconds"].is_null()) {
      int t = 0;
      read(*g, "scheduleTimeoutSeconds", t, path, errors);
      s.scheduling.schedule_timeout_seconds = t;
    }
    read(*g, "queue", s.scheduling.queue, path, errors);
  }
  if (const Json* el = section(spec, "elastic", errors)) {
    ElasticSpec& e = s.elastic.emplace();
    read(*el, "minReplicas", e.min_replicas, "spec.elastic", errors);
    read(*el, "placementTimeoutSeconds", e.placement_timeout_seconds, "spec.elastic", errors);
    read(*el, "growCheckSeconds", e.grow_check_seconds, "spec.elastic", errors);
  }
  s.planned_replicas = s.replicas;
  if (const Json* st = section(spec, "stragglers", errors)) {
    StragglerSpec& g = s.stragglers.emplace();
    read(*st, "threshold", g.threshold, "spec.stragglers", errors);
    read(*st, "windowSteps", g.window_steps, "spec.stragglers", errors);
    read(*st, "action", g.action, "spec.stragglers", errors);
  }
  if (auto t = spec.find("tuning"); t != spec.end() && t->is_object()) {
    if (auto b = t->find("bucketSize"); b != t->end() && b->is_object()) {
      read(*b, "enabled", s.bucket_tuning.enabled, "spec.tuning.bucketSize", errors);
      read(*b, "minMB", s.bucket_tuning.min_mb, "spec.tuning.bucketSize", errors);
      read(*b, "maxMB", s.bucket_tuning.max_mb, "spec.tuning.bucketSize", errors);
      read(*b, "stepsPerTrial", s.bucket_tuning.steps_per_trial, "spec.tuning.bucketSize", errors);
      read(*b, "maxTrials", s.bucket_tuning.max_trials, "spec.tuning.bucketSize", errors);
      read(*b, "confirmRounds", s.bucket_tuning.confirm_rounds, "spec.tuning.bucketSize", errors);
    }
  }
  s.worker_read = read_worker_config(s.worker, s.pod_template);
  return s;
}

std::vector<SpecError> validate_elastic(const TrainingJobSpec& s) {
  std::vector<SpecError> e;
  if (!s.elastic) return e;
  const ElasticSpec& el = *s.elastic;
  const int full = s.planned();
  if (el.min_replicas < 1 || el.min_replicas > full) {
    e.push_back({"spec.elastic.minReplicas",
                 "must be in [1, spec.replicas " + std::to_string(full) + "], got " + std::to_string(el.min_replicas)});
    return e;
  }
  if (el.placement_timeout_seconds < 1 || el.placement_timeout_seconds > 86400)
    e.push_back({"spec.elastic.placementTimeoutSeconds",
                 "must be in [1, 86400], got " + std::to_string(el.placement_timeout_seconds)});
  if (el.grow_check_seconds < 1 || el.grow_check_seconds > 7 * 86400)
    e.push_back({"spec.elastic.growCheckSeconds",
                 "must be in [1, 604800], got " + std::to_string(el.grow_check_seconds)});
  const std::vector<int> sizes = s.elastic_sizes();
  if (sizes.empty() || sizes.front() != el.min_replicas) {
    std::string allowed;
    TrainingJobSpec any = s;
    any.elastic->min_replicas = 1;
    for (int n : any.elastic_sizes()) allowed += (allowed.empty() ? "" : ", ") + std::to_string(n);
    const long long per_pod = s.ranks_per_pod();
    e.push_back({"spec.elastic.minReplicas",
                 std::to_string(el.min_replicas) + " pods (" + std::to_string(el.min_replicas * per_pod) +
                     " ranks) cannot train the global batch planned for " + std::to_string(full * per_pod) +
                     " ranks x train.grad_accum " + std::to_string(s.grad_accum()) +
                     (s.sp() > 1 || s.wp() > 1 ? " with sp " + std::to_string(s.sp()) + " and wp " + std::to_string(s.wp()) : std::string()) +
                     ": a gang must divide the planned micro-batches and the layout; the pod counts that can: " + allowed});
  }
  return e;
}

std::vector<SpecError> validate_stragglers(const TrainingJobSpec& s) {
  std::vector<SpecError> e;
  if (!s.stragglers) return e;
  const StragglerSpec& g = *s.stragglers;
  if (!(g.threshold > 0 && g.threshold <= 10))
    e.push_back({"spec.stragglers.threshold", "must be in (0, 10] (a fraction above the gang's median), got " +
                                                  Json(g.threshold).dump()});
  if (g.window_steps < 2 || g.window_steps > 100000)
    e.push_back({"spec.stragglers.windowSteps", "must be in [2, 100000], got " + std::to_string(g.window_steps)});
  if (g.action != "none" && g.action != "replace")
    e.push_back({"spec.stragglers.action", "must be none or replace, got '" + g.action + "'"});
  if (s.metrics_port() <= 0)
    e.push_back({"spec.stragglers", "needs the ranks' metrics: spec.worker.metrics.port is 0"});
  return e;
}

std::vector<SpecError> validate_scheduling(const TrainingJobSpec& s) {
  std::vector<SpecError> e;
  const SchedulingSpec& g = s.scheduling;
  if (g.gang != "none" && g.gang != "podgroup")
    e.push_back({"spec.scheduling.gang", "must be none or podgroup, got '" + g.gang + "'"});
  if (g.provider != "scheduler-plugins" && g.provider != "volcano")
    e.push_back({"spec.scheduling.provider", "must be scheduler-plugins or volcano, got '" + g.provider + "'"});
  // The other fields shape the PodGroup: without one they would do nothing.
  if (!g.enabled())
    for (const auto& [field, set] : {std::pair{"provider", g.provider_set}, {"schedulerName", !g.scheduler_name.empty()},
                                     {"scheduleTimeoutSeconds", g.schedule_timeout_seconds.has_value()},
                                     {"queue", !g.queue.empty()}})
      if (set)
        e.push_back({std::string("spec.scheduling.") + field,
                     "applies only with spec.scheduling.gang: podgroup (gang is " + g.gang + ")"});
  if (g.schedule_timeout_seconds && (*g.schedule_timeout_seconds < 1 || *g.schedule_timeout_seconds > 86400))
    e.push_back({"spec.scheduling.scheduleTimeoutSeconds",
                 "must be in [1, 86400], got " + std::to_string(*g.schedule_timeout_seconds)});
  if (g.schedule_timeout_seconds && g.volcano())
    e.push_back({"spec.scheduling.scheduleTimeoutSeconds",
                 "is a field of scheduler-plugins' PodGroup; Volcano's has none (provider is volcano)"});
  if (!g.queue.empty() && !g.volcano())
    e.push_back({"spec.scheduling.queue", "is a field of Volcano's PodGroup; set provider: volcano"});
  // Names no scheduler or Volcano Queue can have.
  for (const auto& [field, value] : {std::pair{"schedulerName", g.scheduler_name}, {"queue", g.queue}})
    if (!value.empty() && !dns_subdomain(value))
      e.push_back({std::string("spec.scheduling.") + field,
                   "must be a lowercase DNS name (dot-separated a-z, 0-9 and '-', each part starting and ending "
                   "with a letter or digit; at most 253), got '" + value + "'"});
  if (g.enabled() && s.pod_template.contains("schedulerName"))
    e.push_back({"spec.template.schedulerName",
                 "conflicts with gang scheduling, whose pods go to spec.scheduling.schedulerName (" + g.scheduler() +
                     ")"});
  return e;
}

std::vector<SpecError> validate(const TrainingJobSpec& s) {
  std::vector<SpecError> e;
  if (s.replicas < 1 || s.replicas > 4096) e.push_back({"spec.replicas", "must be in [1, 4096], got " + std::to_string(s.replicas)});
  if (s.image.empty()) e.push_back({"spec.image", "must not be empty"});
  if (s.master_port < 1024 || s.master_port > 65535)
    e.push_back({"spec.masterPort", "must be in [1024, 65535], got " + std::to_string(s.master_port)});
  // spec.worker by the worker's own rules (worker_config.h).
  if (!s.worker_read.config) e.push_back({s.worker_read.error_field, s.worker_read.error});
  const auto gpus = s.gpu_limit();
  if (s.procs_per_pod_auto && !(gpus && *gpus > 0)) {
    const Json* limit = nullptr;
    if (auto l = s.resources.find("limits"); l != s.resources.end() && l->is_object())
      if (auto g = l->find(kGpuResource); g != l->end()) limit = &*g;
    e.push_back({"spec.procsPerPod", std::string("auto takes the pod's ") + kGpuResource + " limit, " +
                                         (limit ? "which must be a whole number above 0, got " + limit->dump()
                                                : std::string("and spec.resources.limits sets none"))});
  }
  if (!s.procs_per_pod_auto && (s.procs_per_pod < 1 || s.procs_per_pod > kMaxProcsPerPod))
    e.push_back({"spec.procsPerPod", "must be in [1, " + std::to_string(kMaxProcsPerPod) + "] or auto, got " +
                                         std::to_string(s.procs_per_pod)});
  else if (s.procs_per_pod_auto && s.ranks_per_pod() > kMaxProcsPerPod)
    // auto is bound like a number: the launcher, the ports and WORLD_SIZE
    // (replicas x procsPerPod, an int32) are sized for it.
    e.push_back({"spec.procsPerPod", "auto takes the pod's " + std::to_string(s.ranks_per_pod()) + " GPUs (spec.resources.limits." +
                                         kGpuResource + "), more than " + std::to_string(kMaxProcsPerPod) +
                                         " ranks per pod"});
  else if (gpus && *gpus > 0 && s.ranks_per_pod() > *gpus)
    e.push_back({"spec.procsPerPod", "is " + std::to_string(s.procs_per_pod) + ", more than the pod's " +
                                         std::to_string(*gpus) + " GPUs (spec.resources.limits." + kGpuResource +
                                         "): every rank needs a GPU of its own"});
  // ISP groups are ranks, not pods: sp and wp divide pods x procsPerPod.
  // In 64 bits: an invalid procsPerPod refused above must not overflow here.
  const long long world = static_cast<long long>(s.replicas) * s.ranks_per_pod();
  const std::string ranks = s.ranks_per_pod() == 1 ? "spec.replicas" : "spec.replicas x spec.procsPerPod";
  if (s.sp() >= 1 && world % s.sp() != 0)
    e.push_back({"spec.replicas", "the ranks (" + ranks + " = " + std::to_string(world) +
                                      ") must be divisible by spec.worker.parallel.sp (" + std::to_string(s.sp()) + ")"});
  if (s.wp() >= 1 && world % s.wp() != 0)
    e.push_back({"spec.replicas", "the ranks (" + ranks + " = " + std::to_string(world) +
                                      ") must be divisible by spec.worker.parallel.wp (" + std::to_string(s.wp()) + ")"});
  if (const kube::Quantity shm = kube::parse_quantity(s.shm_size); !shm.ok)
    e.push_back({"spec.shmSize", shm.error});
  else if (shm.value <= 0)
    e.push_back({"spec.shmSize", "must be positive, got " + s.shm_size});
  if (s.restart.max_restarts < 0) e.push_back({"spec.restartPolicy.maxRestarts", "must be >= 0"});
  if (s.restart.backoff_seconds < 0 || s.restart.backoff_seconds > s.restart.max_backoff_seconds)
    e.push_back({"spec.restartPolicy.backoffSeconds", "must be in [0, maxBackoffSeconds]"});
  // minMB <= maxMB whether or not the tuning is on, as the CRD's CEL rule.
  if ((s.bucket_tuning.enabled && !(s.bucket_tuning.min_mb > 0)) || s.bucket_tuning.min_mb > s.bucket_tuning.max_mb)
    e.push_back({"spec.tuning.bucketSize", "needs 0 < minMB <= maxMB"});
  for (const auto& [field, mb] : {std::pair{"minMB", s.bucket_tuning.min_mb}, std::pair{"maxMB", s.bucket_tuning.max_mb}})
    if (s.bucket_tuning.enabled && !contract::valid_bucket_cap_mb(mb))
      e.push_back({std::string("spec.tuning.bucketSize.") + field,
                   std::string("must be ") + contract::kBucketCapRule + ", got " + Json(mb).dump()});
  if (s.bucket_tuning.enabled && (s.bucket_tuning.confirm_rounds < 0 || s.bucket_tuning.confirm_rounds > 8))
    e.push_back({"spec.tuning.bucketSize.confirmRounds", "must be in [0, 8], got " +
                                                            std::to_string(s.bucket_tuning.confirm_rounds)});
  if (s.ttl_seconds_after_finished && *s.ttl_seconds_after_finished < 0)
    e.push_back({"spec.ttlSecondsAfterFinished", "must be >= 0"});
  // Every resource amount is a quantity the API server would accept in a pod.
  for (const char* list : {"limits", "requests"})
    if (auto l = s.resources.find(list); l != s.resources.end() && l->is_object())
      for (auto it = l->begin(); it != l->end(); ++it) {
        const std::string field = std::string("spec.resources.") + list + "." + it.key();
        const kube::Quantity q = kube::parse_quantity(it.value());
        if (!q.ok) e.push_back({field, q.error});
        else if (q.value < 0) e.push_back({field, "must not be negative, got " + it.value().dump()});
      }
  for (auto& err : validate_scheduling(s)) e.push_back(std::move(err));
  for (auto& err : validate_elastic(s)) e.push_back(std::move(err));
  for (auto& err : validate_stragglers(s)) e.push_back(std::move(err));
  if (auto g = s.pod_template.find("terminationGracePeriodSeconds"); g != s.pod_template.end())
    if (!g->is_number_integer() || g->get<long long>() < 0 || g->get<long long>() > 86400)
      e.push_back({"spec.template.terminationGracePeriodSeconds", "must be a whole number of seconds in [0, 86400], got " + g->dump()});
  // Volumes and env names that would shadow the operator's own.
  if (auto v = s.pod_template.find("volumes"); v != s.pod_template.end() && v->is_array())
    for (const auto& vol : *v)
      if (vol.value("name", "").rfind("weft-", 0) == 0)
        e.push_back({"spec.template.volumes", "volume name '" + vol.value("name", "") + "' uses the reserved prefix weft-"});
  if (auto v = s.pod_template.find("env"); v != s.pod_template.end() && v->is_array())
    for (const auto& env : *v)
      for (const char* n : contract::kOperatorEnv)
        if (env.value("name", "") == n)
          e.push_back({"spec.template.env", std::string("cannot override ") + n + ", which the operator sets"});
  return e;
}

std::vector<SpecError> validate_name(const std::string& name, const TrainingJobSpec& s) {
  // The job's name is its Service's (a DNS-1035 label: no dots, a letter
  // first) and the value of its children's weft.dev/job label, and
  // `<name>-<rank>` is each pod's hostname: the API server would refuse
  // those children, not the job, which would wait for them forever.
  const std::string last_pod = name + "-" + std::to_string(std::max(s.replicas, 1) - 1);
  const bool label = !name.empty() && name.size() <= 63 && name.front() >= 'a' && name.front() <= 'z' &&
                     name.back() != '-' && name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string::npos;
  if (!label)
    return {{"metadata.name", "must be a DNS-1035 label (a-z, 0-9 and '-', a letter first, at most 63 characters): "
                              "it names the job's Service, got '" + name + "'"}};
  if (last_pod.size() > 63)
    return {{"metadata.name", "is too long for " + std::to_string(s.replicas) + " pods: their hostnames <name>-<rank> (" +
                              last_pod + ") must be at most 63 characters: a name of at most " +
                              std::to_string(63 - (last_pod.size() - name.size())) + " characters"}};
  return {};
}

std::string describe(const std::vector<SpecError>& errors) {
  std::string out;
  for (const auto& e : errors) {
    if (!out.empty()) out += "; ";
    out += e.field + ": " + e.message;
  }
  return out;
}

int TrainingJobStatus::counted_restarts(const std::vector<std::string>& uncounted) const {
  int n = restarts;
  for (const std::string& c : uncounted)
    if (auto it = restarts_by_cause.find(c); it != restarts_by_cause.end()) n -= it->second;
  return std::max(n, 0);
}

const Condition* TrainingJobStatus::condition(const std::string& type) const {
  for (const auto& c : conditions)
    if (c.type == type) return &c;
  return nullptr;
}

void TrainingJobStatus::set_condition(const std::string& type, bool status, const std::string& reason,
                                      const std::string& message, long generation, const std::string& now) {
  const std::string st = status ? "True" : "False";
  for (auto& c : conditions) {
    if (c.type != type) continue;
    if (c.status != st) c.last_transition_time = now;
    c.status = st;
    c.reason = reason;
    c.message = message;
    c.observed_generation = generation;
    return;
  }
  conditions.push_back({type, st, reason, message, now, generation});
}

void TrainingJobStatus::remove_condition(const std::string& type) {
  std::erase_if(conditions, [&](const Condition& c) { return c.type == type; });
}

namespace {

// Readers of one status.tuning field: an absent field leaves `out` alone; a
// bad value is reported under its path and leaves `out` alone too.
struct TuningReader {
  std::vector<SpecError>* errors;

  void bad(const std::string& path, const std::string& message) const {
    if (errors) errors->push_back({path, message});
  }
  // A number > 0 (a size in MiB); true when `out` was set.
  bool size(const Json& obj, const char* key, double& out, const std::string& path) const {
    auto it = obj.find(key);
    if (it == obj.end()) return false;
    if (!it->is_number()) {
      bad(path + "." + key, "must be a number, got " + std::string(it->type_name()));
    } else if (!(it->get<double>() > 0)) {
      bad(path + "." + key, "must be > 0, got " + it->dump());
    } else {
      out = it->get<double>();
      return true;
    }
    return false;
  }
  // A number >= 0 (seconds, a score).
  void measure(const Json& obj, const char* key, std::optional<double>& out, const std::string& path) const {
    auto it = obj.find(key);
    if (it == obj.end()) return;
    if (!it->is_number())
      bad(path + "." + key, "must be a number, got " + std::string(it->type_name()));
    else if (!(it->get<double>() >= 0))
      bad(path + "." + key, "must be >= 0, got " + it->dump());
    else
      out = it->get<double>();
  }
  // An integer >= 0 (a step count).
  void count(const Json& obj, const char* key, long& out, const std::string& path) const {
    auto it = obj.find(key);
    if (it == obj.end()) return;
    if (!it->is_number_integer())
      bad(path + "." + key, "must be an integer, got " + it->dump());
    else if (it->get<long>() < 0)
      bad(path + "." + key, "must be >= 0, got " + it->dump());
    else
      out = it->get<long>();
  }
};

}  // namespace

TuningStatus parse_tuning(const Json& j, std::vector<SpecError>* errors) {
  const std::string path = "status.tuning";
  const TuningReader r{errors};
  TuningStatus t;
  if (!j.is_object()) {
    r.bad(path, "must be an object, got " + std::string(j.type_name()));
    return t;
  }
  if (auto s = j.find("state"); s != j.end()) {
    bool known = false;
    for (TuningState st : {TuningState::Searching, TuningState::Converged, TuningState::Stopped})
      if (s->is_string() && s->get<std::string>() == tuning_state_name(st)) t.state = st, known = true;
    if (!known) r.bad(path + ".state", "must be one of Searching, Converged, Stopped; got " + s->dump());
  }
  if (!j.contains("currentBucketMB")) r.bad(path + ".currentBucketMB", "is required");
  r.size(j, "currentBucketMB", t.current_bucket_mb, path);
  double chosen = 0;
  if (r.size(j, "chosenBucketMB", chosen, path)) t.chosen_bucket_mb = chosen;
  if (t.state == TuningState::Converged && !j.contains("chosenBucketMB"))
    r.bad(path + ".chosenBucketMB", "is required when state is Converged");
  if (t.state != TuningState::Converged && t.chosen_bucket_mb) {
    r.bad(path + ".chosenBucketMB", std::string("must be absent while state is ") + tuning_state_name(t.state));
    t.chosen_bucket_mb.reset();
  }
  if (auto trials = j.find("trials"); trials != j.end()) {
    if (!trials->is_array()) {
      r.bad(path + ".trials", "must be an array, got " + std::string(trials->type_name()));
      return t;
    }
    for (size_t i = 0; i < trials->size(); ++i) {
      const Json& tj = (*trials)[i];
      const std::string tpath = path + ".trials[" + std::to_string(i) + "]";
      if (!tj.is_object()) {
        r.bad(tpath, "must be an object, got " + std::string(tj.type_name()));
        continue;
      }
      TuningTrial trial;
      if (!tj.contains("bucketMB")) r.bad(tpath + ".bucketMB", "is required");
      r.size(tj, "bucketMB", trial.bucket_mb, tpath);
      r.count(tj, "steps", trial.steps, tpath);
      r.measure(tj, "medianStepSeconds", trial.median_step_seconds, tpath);
      r.measure(tj, "exposedCommSeconds", trial.exposed_comm_seconds, tpath);
      r.measure(tj, "score", trial.score, tpath);
      t.trials.push_back(trial);
    }
  }
  return t;
}

Json to_json(const TuningStatus& t) {
  Json j = {{"state", tuning_state_name(t.state)}, {"currentBucketMB", t.current_bucket_mb}};
  if (t.chosen_bucket_mb) j["chosenBucketMB"] = *t.chosen_bucket_mb;
  Json trials = Json::array();
  for (const auto& trial : t.trials) {
    Json tj = {{"bucketMB", trial.bucket_mb}, {"steps", trial.steps}};
    if (trial.median_step_seconds) tj["medianStepSeconds"] = *trial.median_step_seconds;
    if (trial.exposed_comm_seconds) tj["exposedCommSeconds"] = *trial.exposed_comm_seconds;
    if (trial.score) tj["score"] = *trial.score;
    trials.push_back(tj);
  }
  j["trials"] = trials;
  return j;
}

TrainingJobStatus parse_status(const Json& st, std::vector<SpecError>* errors) {
  TrainingJobStatus s;
  if (!st.is_object()) return s;
  s.phase = st.value("phase", "");
  s.observed_generation = st.value("observedGeneration", 0L);
  s.attempt = st.value("attempt", 0);
  s.ready_replicas = st.value("readyReplicas", 0);
  s.ranks = st.value("ranks", 0);
  s.restarts = st.value("restarts", 0);
  if (auto rc = st.find("restartsByCause"); rc != st.end() && rc->is_object())
    for (auto it = rc->begin(); it != rc->end(); ++it)
      if (it->is_number_integer() && it->get<int>() > 0) s.restarts_by_cause[it.key()] = it->get<int>();
  s.last_restart_cause = st.value("lastRestartCause", "");
  s.start_time = st.value("startTime", "");
  s.completion_time = st.value("completionTime", "");
  s.last_restart_time = st.value("lastRestartTime", "");
  s.attempt_start_time = st.value("attemptStartTime", "");
  if (auto c = st.find("conditions"); c != st.end() && c->is_array())
    for (const auto& j : *c)
      s.conditions.push_back({j.value("type", ""), j.value("status", ""), j.value("reason", ""),
                              j.value("message", ""), j.value("lastTransitionTime", ""),
                              j.value("observedGeneration", 0L)});
  if (st.contains("progress")) s.extra["progress"] = st["progress"];
  if (auto t = st.find("tuning"); t != st.end() && !t->is_null()) s.tuning = parse_tuning(*t, errors);
  if (auto sg = st.find("stragglers"); sg != st.end() && sg->is_object()) {
    StragglerStatus& g = s.stragglers.emplace();
    if (auto n = sg->find("avoidedNodes"); n != sg->end() && n->is_array())
      for (const auto& node : *n)
        if (node.is_string()) g.avoided_nodes.push_back(node.get<std::string>());
    g.replacements = sg->value("replacements", 0);
  }
  if (auto el = st.find("elastic"); el != st.end() && el->is_object()) {
    ElasticStatus& e = s.elastic.emplace();
    e.current_replicas = el->value("currentReplicas", 0);
    e.planned_replicas = el->value("plannedReplicas", 0);
    e.resizes = el->value("resizes", 0);
    e.last_resize_time = el->value("lastResizeTime", "");
    if (e.current_replicas < 1 || e.planned_replicas < e.current_replicas) {
      if (errors)
        errors->push_back({"status.elastic", "currentReplicas " + std::to_string(e.current_replicas) +
                                                 " is not in [1, plannedReplicas " +
                                                 std::to_string(e.planned_replicas) + "]"});
      s.elastic.reset();
    }
  }
  return s;
}

Json to_json(const TrainingJobStatus& s) {
  Json j = s.extra;
  if (!s.phase.empty()) j["phase"] = s.phase;
  j["observedGeneration"] = s.observed_generation;
  j["attempt"] = s.attempt;
  j["readyReplicas"] = s.ready_replicas;
  if (s.ranks > 0) j["ranks"] = s.ranks;
  j["restarts"] = s.restarts;
  if (!s.restarts_by_cause.empty()) j["restartsByCause"] = s.restarts_by_cause;
  if (!s.last_restart_cause.empty()) j["lastRestartCause"] = s.last_restart_cause;
  if (!s.start_time.empty()) j["startTime"] = s.start_time;
  if (!s.completion_time.empty()) j["completionTime"] = s.completion_time;
  if (!s.last_restart_time.empty()) j["lastRestartTime"] = s.last_restart_time;
  if (!s.attempt_start_time.empty()) j["attemptStartTime"] = s.attempt_start_time;
  Json conds = Json::array();
  for (const auto& c : s.conditions) {
    Json cj = {{"type", c.type}, {"status", c.status}, {"reason", c.reason},
               {"observedGeneration", c.observed_generation}};
    // An empty message is left out, not written as "": a condition's message
    // is optional, and v1.20 API servers refused the status update otherwise.
    if (!c.message.empty()) cj["message"] = c.message;
    if (!c.last_transition_time.empty()) cj["lastTransitionTime"] = c.last_transition_time;
    conds.push_back(cj);
  }
  j["conditions"] = conds;
  if (s.tuning) j["tuning"] = to_json(*s.tuning);
  if (s.stragglers) j["stragglers"] = {{"avoidedNodes", s.stragglers->avoided_nodes},
                                       {"replacements", s.stragglers->replacements}};
  if (s.elastic) {
    const ElasticStatus& e = *s.elastic;
    j["elastic"] = {{"currentReplicas", e.current_replicas},
                    {"plannedReplicas", e.planned_replicas},
                    // kubectl get tj's Size column
                    {"size", std::to_string(e.current_replicas) + "/" + std::to_string(e.planned_replicas)},
                    {"resizes", e.resizes}};
    if (!e.last_resize_time.empty()) j["elastic"]["lastResizeTime"] = e.last_resize_time;
  }
  return j;
}

}  // namespace weft::tj
