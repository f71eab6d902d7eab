// Request fields the endpoints share that are not sampling (internal to
// proxy/openai): which top-level fields an endpoint knows, identifiers,
// service_tier, stream_options, the prompt-cache hints, reasoning effort and
// verbosity.
//
// The rule they implement (docs/openai-api.md lists every field): a field has
// an effect here, or is refused with a 400 naming it; only hosted tools (which
// run at OpenAI, not in a model) are skipped, and named in a response header
// by the gateway. A field this server does not know is refused as OpenAI
// refuses one ("Unrecognized request argument supplied"), so a client never
// believes a setting took effect that did not.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "proxy/openai/json_fields.h"
#include "proxy/openai/request_types.h"

namespace lg::proxy::openai::detail {

// The first top-level field of `body` not in `known`: 400 unknown_parameter
// naming it. A null value counts too: the name itself is unknown.
std::optional<ApiError> refuseUnknownFields(const json& body, std::span<const std::string_view> known);

// A field that is refused whenever it is sent with a value (not null, not
// false, not an empty object or array): 400 unsupported_parameter naming it,
// with `why`.
void refuseIfSet(FieldReader& r, std::string_view key, std::string_view why);

// user, safety_identifier, prompt_cache_key: strings that identify the end
// user or the conversation to OpenAI's abuse monitoring and cache routing.
// Here they are checked and change nothing in the output: no abuse
// monitoring runs, and the prefix cache finds prefixes by their content.
void readIdentifiers(FieldReader& r);

// service_tier: "auto" and "default" are how every request runs here;
// "flex", "scale" and "priority" ask for a processing class (and price) this
// server does not have: 400.
void readServiceTier(FieldReader& r);

// stream_options {include_usage, include_obfuscation}: include_usage as
// OpenAI (only when streaming); include_obfuscation: false is what this server
// does (no obfuscation field), true is refused; any other key is refused.
void readStreamOptions(FieldReader& r, bool stream, bool* include_usage);

// prompt_cache_retention ("in_memory", "24h") and prompt_cache_options
// {mode, ttl}: OpenAI's cache hints, both best effort there. The prefix cache
// keeps blocks in memory, then on disk, until evicted (docs/cache.md), which is
// at least what either retention asks on a best-effort basis, and it caches
// every prefix implicitly: mode "explicit" (only client-marked breakpoints) is
// refused, as is a ttl other than OpenAI's "30m".
void readPromptCacheHints(FieldReader& r);

// A reasoning effort value under `param` (null: not sent): "none" and
// "minimal" ask for no reasoning, "low" to "max" for reasoning.
std::optional<ApiError> readReasoningEffort(const json& value, const std::string& param, ChatPrompt& prompt);

// A verbosity value under `param` (null: not sent): "low", "medium", "high".
std::optional<ApiError> readVerbosity(const json& value, const std::string& param, ChatPrompt& prompt);

}  // namespace lg::proxy::openai::detail
