#include "proxy/admin/replica_purges.h"

#include <utility>

#include "proxy/http/proxy_log.h"

namespace lg::proxy {

namespace {
constexpr std::string_view kPurgePrefix = "resppurge/";
}  // namespace

ReplicaPurges::ReplicaPurges(const TeamsApi& teams, ResponseStore* responses, billing::KeyStore& keys,
                             billing::ControlPlane& control)
    : teams_(teams), responses_(responses) {
  thread_ = std::thread([this] { run(); });
  keys.onTeamDeletedElsewhere([this](const billing::TeamInfo& team) {
    post([this, team] {
      const TeamsApi::Purged purged = teams_.purge(team);
      proxyLog()->info("team {} (generation {}) was deleted on another replica: purged here {}{}", team.id,
                       team.generation, purged.counts.dump(), purged.failed ? " (a step failed; see above)" : "");
    });
  });
  control.addApplier({std::string(kPurgePrefix)}, this);
}

ReplicaPurges::~ReplicaPurges() {
  size_t dropped = 0;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    dropped = jobs_.size();
    jobs_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (dropped > 0) proxyLog()->warn("{} purge(s) of data deleted on another replica left undone at shutdown", dropped);
}

void ReplicaPurges::applyControl(const std::vector<billing::ControlRecord>& records) {
  if (responses_ == nullptr) return;
  for (const billing::ControlRecord& r : records) {
    if (!r.remote || !r.value) continue;
    std::string owner = r.key.substr(kPurgePrefix.size());
    post([this, owner = std::move(owner)] {
      auto n = responses_->purgeOwner(owner);
      if (n.isOk()) {
        proxyLog()->info("stored responses of key {} were purged on another replica: {} purged here", owner, *n);
      } else {
        proxyLog()->error("purging the stored responses of key {} (purged on another replica) failed here: {}", owner,
                          n.status().toString());
      }
    });
  }
}

void ReplicaPurges::post(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void ReplicaPurges::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    running_job_ = true;
    lock.unlock();
    job();
    lock.lock();
    running_job_ = false;
    ++run_;
    cv_.notify_all();
  }
}

void ReplicaPurges::waitIdle() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return stopping_ || (jobs_.empty() && !running_job_); });
}

uint64_t ReplicaPurges::purgesRun() const {
  std::lock_guard lock(mu_);
  return run_;
}

}  // namespace lg::proxy
