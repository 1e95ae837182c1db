#include "kube/leader_election.h"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <mutex>

#include "kube/clock.h"

namespace weft::kube {
using SteadyClock = std::chrono::steady_clock;

LeaderElector::LeaderElector(KubeApi& api, LeaderElectionConfig cfg) : api_(api), cfg_(std::move(cfg)) {}

bool LeaderElector::try_acquire_or_renew() {
  const std::string now = format_micro_time(std::chrono::system_clock::now());
  const int duration_s = static_cast<int>(std::max<long>(1, std::chrono::duration_cast<std::chrono::seconds>(cfg_.lease_duration).count()));
  auto cur = api_.get(kLeases, cfg_.ns, cfg_.name);
  if (!cur) {
    if (!cur.error().not_found()) {
      spdlog::warn("leader election: reading lease {}/{}: {}", cfg_.ns, cfg_.name, cur.error().message);
      return false;
    }
    Json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", cfg_.name}, {"namespace", cfg_.ns}}},
                  {"spec",
                   {{"holderIdentity", cfg_.identity},
                    {"leaseDurationSeconds", duration_s},
                    {"acquireTime", now},
                    {"renewTime", now},
                    {"leaseTransitions", 0}}}};
    auto created = api_.create(kLeases, cfg_.ns, lease);
    if (!created) return false;  // someone else created it first
    observed_ = (*created)["spec"];
    observed_at_ = SteadyClock::now();
    return true;
  }
  Json lease = *cur;
  const Json spec = lease.value("spec", Json::object());
  if (spec != observed_) {
    observed_ = spec;
    observed_at_ = SteadyClock::now();
  }
  const std::string holder = spec.value("holderIdentity", "");
  const auto held_for = std::chrono::seconds(spec.value("leaseDurationSeconds", duration_s));
  if (!holder.empty() && holder != cfg_.identity && SteadyClock::now() < observed_at_ + held_for)
    return false;  // another replica holds an unexpired lease

  Json next = spec;
  if (holder != cfg_.identity) {
    next["acquireTime"] = now;
    next["leaseTransitions"] = spec.value("leaseTransitions", 0) + (holder.empty() ? 0 : 1);
  }
  next["holderIdentity"] = cfg_.identity;
  next["leaseDurationSeconds"] = duration_s;
  next["renewTime"] = now;
  lease["spec"] = next;
  auto updated = api_.update(kLeases, cfg_.ns, lease);  // carries resourceVersion
  if (!updated) return false;
  observed_ = (*updated)["spec"];
  observed_at_ = SteadyClock::now();
  return true;
}

void LeaderElector::release() {
  auto cur = api_.get(kLeases, cfg_.ns, cfg_.name);
  if (!cur || (*cur)["spec"].value("holderIdentity", "") != cfg_.identity) return;
  Json lease = *cur;
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = format_micro_time(std::chrono::system_clock::now());
  if (auto res = api_.update(kLeases, cfg_.ns, lease); !res)
    spdlog::warn("leader election: release failed: {}", res.error().message);
  else
    spdlog::info("leader election: released lease {}/{}", cfg_.ns, cfg_.name);
}

void LeaderElector::run(std::stop_token stop, const std::function<void()>& on_started_leading,
                        const std::function<void()>& on_stopped_leading) {
  std::mutex mu;
  std::condition_variable_any cv;
  auto sleep = [&](std::chrono::milliseconds d) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, stop, d, [] { return false; });
  };
  spdlog::info("leader election: {} campaigning for lease {}/{}", cfg_.identity, cfg_.ns, cfg_.name);
  while (!stop.stop_requested() && !try_acquire_or_renew()) sleep(cfg_.retry_period);
  if (stop.stop_requested()) return;
  leader_ = true;
  ++transitions_;
  spdlog::info("leader election: {} is the leader", cfg_.identity);
  on_started_leading();
  auto last_renew = SteadyClock::now();
  while (!stop.stop_requested()) {
    sleep(cfg_.retry_period);
    if (stop.stop_requested()) break;
    if (try_acquire_or_renew()) {
      last_renew = SteadyClock::now();
    } else if (SteadyClock::now() - last_renew > cfg_.renew_deadline) {
      spdlog::error("leader election: {} could not renew within {} ms; stepping down", cfg_.identity,
                    cfg_.renew_deadline.count());
      break;
    }
  }
  leader_ = false;
  on_stopped_leading();
  release();
}

}  // namespace weft::kube
