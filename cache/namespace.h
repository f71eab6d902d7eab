// Cache namespaces: whose blocks a lookup may read and where a publish goes.
//
// A block key chains over its namespace (fingerprint.h), so blocks of
// different namespaces never meet: a tenant can neither hit nor wait on nor
// time another tenant's blocks. Two kinds exist, as distinct types so that
// one can never be passed for the other:
//   - TeamNamespace: a team's own, private namespace, made from the team's
//     immutable id (never its display name, which can be renamed or reused)
//     and its generation (common/team_id.h, teamScope): an id reused after
//     its team was deleted names a new namespace, where nothing of the
//     earlier owner's can be hit. Every request reads and publishes its own
//     team's namespace.
//   - SharedNamespace: a namespace an admin publishes a prefix into on purpose
//     (a company-wide system prompt), readable only by the teams it has been
//     granted to (PrefixCache::grantShared).
// The key strings carry the kind ("team:" / "shared:"), so a team and a shared
// namespace with the same name are still different namespaces.
//
// Thread-safety: immutable values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace lg::cache {

class TeamNamespace {
 public:
  // Ids follow the team-id rule (common/team_id.h: 1..128 characters of
  // [A-Za-z0-9._-]); InvalidArgument otherwise. `generation`: the team's
  // (billing::TeamInfo); 0 is the key every namespace had before.
  static Result<TeamNamespace> ofTeam(std::string_view team_id, uint32_t generation = 0);

  const std::string& key() const { return key_; }  // what block keys chain over
  // The team id, without the generation.
  std::string_view id() const {
    std::string_view scope = std::string_view(key_).substr(kPrefix.size());
    return scope.substr(0, scope.find('#'));
  }
  bool operator==(const TeamNamespace&) const = default;

 private:
  static constexpr std::string_view kPrefix = "team:";
  explicit TeamNamespace(std::string key) : key_(std::move(key)) {}
  std::string key_;
};

class SharedNamespace {
 public:
  // Names follow the rule of team ids.
  static Result<SharedNamespace> named(std::string_view name);

  const std::string& key() const { return key_; }
  std::string_view name() const { return std::string_view(key_).substr(kPrefix.size()); }
  bool operator==(const SharedNamespace&) const = default;

 private:
  static constexpr std::string_view kPrefix = "shared:";
  explicit SharedNamespace(std::string key) : key_(std::move(key)) {}
  std::string key_;
};

}  // namespace lg::cache
