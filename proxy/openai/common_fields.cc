#include "proxy/openai/common_fields.h"

#include <algorithm>

namespace lg::proxy::openai::detail {

namespace {

bool oneOf(const std::string& value, std::initializer_list<std::string_view> values) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

std::string quoted(std::initializer_list<std::string_view> values) {
  std::string out;
  for (std::string_view v : values) {
    if (!out.empty()) out += ", ";
    out += "'" + std::string(v) + "'";
  }
  return out;
}

// A string field limited to `values`; false when absent (or after an error).
bool readEnum(FieldReader& r, std::string_view key, std::initializer_list<std::string_view> values,
              std::string& out) {
  if (!r.string(key, out)) return false;
  if (oneOf(out, values)) return true;
  r.fail(invalidRequest(r.path(key), "invalid_value",
                        r.path(key) + " must be one of " + quoted(values) + ", got '" + out.substr(0, 64) + "'"));
  return false;
}

}  // namespace

std::optional<ApiError> refuseUnknownFields(const json& body, std::span<const std::string_view> known) {
  for (const auto& [key, value] : body.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const std::string name = key.substr(0, 64);
    return invalidRequest(name, "unknown_parameter", "Unrecognized request argument supplied: " + name);
  }
  return std::nullopt;
}

void refuseIfSet(FieldReader& r, std::string_view key, std::string_view why) {
  const json* v = r.find(key);
  if (v == nullptr || (v->is_boolean() && !v->get<bool>()) || ((v->is_object() || v->is_array()) && v->empty())) {
    return;
  }
  r.fail(invalidRequest(r.path(key), "unsupported_parameter",
                        r.path(key) + " is not supported by this server: " + std::string(why)));
}

void readIdentifiers(FieldReader& r) {
  std::string s;
  for (std::string_view key : {"user", "safety_identifier", "prompt_cache_key"}) r.string(key, s);
}

void readServiceTier(FieldReader& r) {
  std::string tier;
  if (!readEnum(r, "service_tier", {"auto", "default", "flex", "scale", "priority"}, tier)) return;
  if (tier != "auto" && tier != "default") {
    r.fail(invalidRequest(r.path("service_tier"), "unsupported_value",
                          "service_tier '" + tier + "' is not offered by this server; every request runs at 'default'"));
  }
}

void readStreamOptions(FieldReader& r, bool stream, bool* include_usage) {
  const json* options = r.find("stream_options");
  if (options == nullptr || r.failed()) return;
  const std::string param = r.path("stream_options");
  if (!options->is_object()) return r.fail(wrongType(param, "an object", *options));
  FieldReader o(*options, param);
  for (const auto& [key, value] : options->items()) {
    if (key != "include_usage" && key != "include_obfuscation") {
      return r.fail(invalidRequest(fieldPath(param, key), "unknown_parameter",
                                   "Unrecognized request argument supplied: " + fieldPath(param, key).substr(0, 96)));
    }
  }
  bool usage = false;
  if (o.boolean("include_usage", usage) && include_usage != nullptr) *include_usage = usage && stream;
  bool obfuscation = false;
  if (o.boolean("include_obfuscation", obfuscation) && obfuscation) {
    o.fail(invalidRequest(o.path("include_obfuscation"), "unsupported_value",
                          "stream obfuscation is not implemented by this server; send include_obfuscation: false or "
                          "omit it"));
  }
  if (o.failed()) r.fail(o.takeError());
}

void readPromptCacheHints(FieldReader& r) {
  std::string s;
  readEnum(r, "prompt_cache_retention", {"in_memory", "24h"}, s);
  const json* options = r.find("prompt_cache_options");
  if (options == nullptr || r.failed()) return;
  const std::string param = r.path("prompt_cache_options");
  if (!options->is_object()) return r.fail(wrongType(param, "an object", *options));
  FieldReader o(*options, param);
  for (const auto& [key, value] : options->items()) {
    if (key != "mode" && key != "ttl") {
      return r.fail(invalidRequest(fieldPath(param, key), "unknown_parameter",
                                   "Unrecognized request argument supplied: " + fieldPath(param, key).substr(0, 96)));
    }
  }
  if (readEnum(o, "mode", {"implicit", "explicit"}, s) && s == "explicit") {
    o.fail(invalidRequest(o.path("mode"), "unsupported_value",
                          "explicit cache breakpoints are not supported: the prefix cache caches every prefix "
                          "implicitly; send mode 'implicit' or omit it"));
  }
  readEnum(o, "ttl", {"30m"}, s);
  if (o.failed()) r.fail(o.takeError());
}

std::optional<ApiError> readReasoningEffort(const json& value, const std::string& param, ChatPrompt& prompt) {
  if (value.is_null()) return std::nullopt;
  if (!value.is_string()) return wrongType(param, "a string", value);
  const std::string& effort = value.get_ref<const std::string&>();
  if (oneOf(effort, {"none", "minimal"})) {
    prompt.reasoning = false;
  } else if (oneOf(effort, {"low", "medium", "high", "xhigh", "max"})) {
    // DeepSeek's templates switch thinking on or off; there is no budget
    // between, so every effort from "low" up is thinking on.
    prompt.reasoning = true;
  } else {
    return invalidRequest(param, "invalid_value",
                          param + " must be one of " + quoted({"none", "minimal", "low", "medium", "high", "xhigh", "max"}) +
                              ", got '" + effort.substr(0, 64) + "'");
  }
  prompt.reasoning_param = param;
  return std::nullopt;
}

std::optional<ApiError> readVerbosity(const json& value, const std::string& param, ChatPrompt& prompt) {
  if (value.is_null()) return std::nullopt;
  if (!value.is_string()) return wrongType(param, "a string", value);
  const std::string& v = value.get_ref<const std::string&>();
  if (v == "low") prompt.verbosity = Verbosity::kLow;
  else if (v == "medium") prompt.verbosity = Verbosity::kMedium;
  else if (v == "high") prompt.verbosity = Verbosity::kHigh;
  else {
    return invalidRequest(param, "invalid_value",
                          param + " must be one of 'low', 'medium', 'high', got '" + v.substr(0, 64) + "'");
  }
  return std::nullopt;
}

}  // namespace lg::proxy::openai::detail
