#include "common/team_id.h"

#include <algorithm>
#include <string>

namespace lg {
namespace {

// Spelled out rather than std::isalnum, which follows the locale.
bool teamIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

}  // namespace

bool validTeamId(std::string_view id) {
  return !id.empty() && id.size() <= kMaxTeamIdLength && std::all_of(id.begin(), id.end(), teamIdChar);
}

Status checkTeamId(std::string_view id, std::string_view what) {
  if (id.empty() || id.size() > kMaxTeamIdLength) {
    return invalidArgument(std::string(what) + " must be 1 to 128 characters, got " + std::to_string(id.size()));
  }
  if (!validTeamId(id)) {
    return invalidArgument(std::string(what) + " may hold only letters, digits, '.', '_' and '-'");
  }
  return Status::ok();
}

std::string teamScope(std::string_view id, uint32_t generation) {
  std::string scope(id);
  if (generation > 0) scope += "#" + std::to_string(generation);
  return scope;
}

}  // namespace lg
