// ReplicaPurges: purges on this replica what an admin deleted on another
// (docs/billing.md, "The control plane"): a team's data (TeamsApi::purge:
// its cache namespace, stored responses, dashboard sessions and shared
// grants) once the control plane's follower applied the team's deletion,
// and a key's stored responses once it applied a resppurge/<key id> record
// (DELETE /admin/responses elsewhere). The follower must not wait for a
// disk tier or for requests to drain, so the purges run here, on one thread
// of their own, in the order they were applied.
//
// What is still queued when it is destroyed is not purged (logged): the
// team's keys are revoked everywhere by then, so nothing can read it, and
// deleting the team again purges it.
//
// Thread-safety: applyControl() and the team observer may run on any
// thread; the control plane's follower must be stopped before this goes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "billing/control_plane.h"
#include "billing/key_store.h"
#include "proxy/admin/teams_api.h"
#include "proxy/gateway/response_store.h"

namespace lg::proxy {

class ReplicaPurges final : public billing::ControlApplier {
 public:
  // Registers with `keys` (teams deleted elsewhere) and `control`
  // (resppurge/ records); all must outlive it. `responses` may be null.
  ReplicaPurges(const TeamsApi& teams, ResponseStore* responses, billing::KeyStore& keys,
                billing::ControlPlane& control);
  ~ReplicaPurges() override;
  ReplicaPurges(const ReplicaPurges&) = delete;
  ReplicaPurges& operator=(const ReplicaPurges&) = delete;

  // ControlApplier: resppurge/<key id> records committed elsewhere queue a
  // purge of that key's stored responses here (this replica's own purges
  // already ran in the admin call).
  void applyControl(const std::vector<billing::ControlRecord>& records) override;

  // Waits until every purge queued so far has run (tests).
  void waitIdle();
  uint64_t purgesRun() const;

 private:
  void post(std::function<void()> job);
  void run();

  const TeamsApi& teams_;
  ResponseStore* const responses_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;  // guarded by mu_
  bool running_job_ = false;                // guarded by mu_
  bool stopping_ = false;                   // guarded by mu_
  uint64_t run_ = 0;                        // guarded by mu_
  std::thread thread_;
};

}  // namespace lg::proxy
