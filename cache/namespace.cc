#include "cache/namespace.h"

namespace lg::cache {
namespace {

Status checkName(std::string_view what, std::string_view name) {
  if (name.empty() || name.size() > 128) {
    return invalidArgument(std::string(what) + " must be 1 to 128 characters, got " + std::to_string(name.size()));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return invalidArgument(std::string(what) + " may hold only letters, digits, '.', '_' and '-'");
  }
  return Status::ok();
}

}  // namespace

Result<TeamNamespace> TeamNamespace::ofTeam(std::string_view team_id) {
  LG_RETURN_IF_ERROR(checkName("team id", team_id));
  return TeamNamespace(std::string(kPrefix) + std::string(team_id));
}

Result<SharedNamespace> SharedNamespace::named(std::string_view name) {
  LG_RETURN_IF_ERROR(checkName("shared namespace name", name));
  return SharedNamespace(std::string(kPrefix) + std::string(name));
}

}  // namespace lg::cache
