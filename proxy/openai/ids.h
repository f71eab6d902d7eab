// Identifiers and timestamps of OpenAI objects: "chatcmpl-...", "cmpl-...",
// "resp_...", "msg_...", "fc_...", "rs_...", "call_...".
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lg::proxy::openai {

// prefix + `random_chars` characters of [A-Za-z0-9] from a per-thread
// generator seeded from std::random_device: unique in practice, not secret.
std::string newId(std::string_view prefix, size_t random_chars = 24);

// The id of a Responses output item: its prefix ("msg_", "fc_", "ctc_", "rs_"), the
// response id's random part and the item's output index, "msg_<R>_2" for
// output[2] of "resp_<R>". So an item_reference names where the item is
// stored, and the server needs no index of items to resolve it.
std::string outputItemId(std::string_view prefix, std::string_view response_id, size_t output_index);
// The response id and output index an outputItemId() names; nullopt: not one.
struct OutputItemRef {
  std::string response_id;
  size_t output_index = 0;
};
std::optional<OutputItemRef> parseOutputItemId(std::string_view item_id);

}  // namespace lg::proxy::openai
