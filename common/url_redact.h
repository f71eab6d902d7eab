// Connection strings with their password hidden, for logs and `latentgate
// config`: a PostgreSQL or Redis URL ("postgresql://user:secret@host/db",
// "redis://:secret@host") or a libpq key=value string ("host=h
// password=secret") may carry a password, which must never reach a log line.
#pragma once

#include <string>
#include <string_view>

namespace lg {

// The URL with the password (the userinfo's part after ':', a `password=`
// query parameter or key=value pair) replaced by "***"; everything else as
// given. A string with no password comes back unchanged.
std::string redactUrlPassword(std::string_view url);

// `text` (an error message that might quote the URL) with every occurrence
// of the URL's password replaced by "***".
std::string redactPasswordIn(std::string_view text, std::string_view url);

}  // namespace lg
