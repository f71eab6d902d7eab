// How strong a secret a person chose is: the admin key and the metrics token
// (docs/security.md, "Tenancy: team lifecycle, fingerprints, small limits").
//
// The estimate is length x log2(the alphabet its character classes span):
// lowercase letters 26, uppercase 26, digits 10, other printable ASCII 33
// (anything else counts as the 33 too). It is an upper bound for a
// human-chosen string (a dictionary word scores as random letters), so it
// can only refuse too little, never too much: a 16-character key of
// lowercase letters and digits ("adm-secret123456", 98 bits) is refused, a
// generated one ("lg-admin-" + 43 base64url characters, ~341 bits) passes.
//
// Thread-safety: pure functions.
#pragma once

#include <string_view>

#include "common/status.h"

namespace lg {

inline constexpr double kMinSecretBits = 128.0;

double estimatedSecretBits(std::string_view secret);

// InvalidArgument naming `what` (and never the secret) when its estimate is
// below kMinSecretBits; OK otherwise.
Status checkSecretStrength(std::string_view secret, std::string_view what);

}  // namespace lg
