#include "common/secret_strength.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace lg {

double estimatedSecretBits(std::string_view secret) {
  bool lower = false, upper = false, digit = false, other = false;
  for (char c : secret) {
    // Spelled out rather than std::islower and friends, which follow the locale.
    if (c >= 'a' && c <= 'z') {
      lower = true;
    } else if (c >= 'A' && c <= 'Z') {
      upper = true;
    } else if (c >= '0' && c <= '9') {
      digit = true;
    } else {
      other = true;
    }
  }
  const int alphabet = (lower ? 26 : 0) + (upper ? 26 : 0) + (digit ? 10 : 0) + (other ? 33 : 0);
  if (alphabet <= 1) return 0.0;
  return static_cast<double>(secret.size()) * std::log2(static_cast<double>(alphabet));
}

Status checkSecretStrength(std::string_view secret, std::string_view what) {
  const double bits = estimatedSecretBits(secret);
  if (bits >= kMinSecretBits) return Status::ok();
  char estimate[32];
  std::snprintf(estimate, sizeof estimate, "%.0f", bits);
  return invalidArgument(std::string(what) + " is too weak: about " + estimate + " bits (" +
                         std::to_string(secret.size()) +
                         " characters x log2 of the alphabet their character classes span), at least 128 are "
                         "required. Use a random string, for example 32 characters of letters and digits "
                         "(`openssl rand -base64 32`), or leave the admin key unset to have one generated.");
}

}  // namespace lg
