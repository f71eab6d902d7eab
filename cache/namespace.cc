#include "cache/namespace.h"

#include "common/team_id.h"

namespace lg::cache {

Result<TeamNamespace> TeamNamespace::ofTeam(std::string_view team_id, uint32_t generation) {
  LG_RETURN_IF_ERROR(checkTeamId(team_id, "team id"));
  return TeamNamespace(std::string(kPrefix) + teamScope(team_id, generation));
}

Result<SharedNamespace> SharedNamespace::named(std::string_view name) {
  LG_RETURN_IF_ERROR(checkTeamId(name, "shared namespace name"));
  return SharedNamespace(std::string(kPrefix) + std::string(name));
}

}  // namespace lg::cache
