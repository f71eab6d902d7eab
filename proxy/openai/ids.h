// Identifiers and timestamps of OpenAI objects: "chatcmpl-...", "cmpl-...",
// "resp_...", "msg_...", "fc_...", "rs_...", "call_...".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lg::proxy::openai {

// prefix + `random_chars` characters of [A-Za-z0-9] from a per-thread
// generator seeded from std::random_device: unique in practice, not secret.
std::string newId(std::string_view prefix, size_t random_chars = 24);

}  // namespace lg::proxy::openai
