// Typed access to a request's JSON fields for the parsers of proxy/openai
// (internal: not for the server). Every read names the parameter's full path
// ("messages[2].content[0].text") in the error it reports, and reports wrong
// types as such ("temperature must be a number, got a string"), never through
// nlohmann::json's exceptions.
//
// A FieldReader reads one JSON object; a JSON null counts as absent, as in
// OpenAI's API (clients send `"stop": null` for "no stop strings"). The first
// error is kept; reads after it do nothing, so a parser reads a run of fields
// and checks failed() once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "proxy/openai/api_error.h"

namespace lg::proxy::openai::detail {

using nlohmann::json;

// "a string", "an integer", "an array", ... (for error messages).
std::string_view typeName(const json& value);

// "prefix.key" (or "key" when prefix is empty); "prefix[i]".
std::string fieldPath(std::string_view prefix, std::string_view key);
std::string indexPath(std::string_view prefix, size_t index);

ApiError wrongType(const std::string& param, std::string_view expected, const json& got);

class FieldReader {
 public:
  // `object` must outlive the reader. `prefix` is the path of the object
  // ("" for the body, "messages[2]" for a message).
  FieldReader(const json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}

  std::string path(std::string_view key) const { return fieldPath(prefix_, key); }

  // The field, or nullptr when absent or null.
  const json* find(std::string_view key) const;

  // Each returns whether the field was present (and of the right type); on a
  // wrong type or value it records the error and returns false.
  bool string(std::string_view key, std::string& out);
  bool boolean(std::string_view key, bool& out);
  // A JSON integer, or a number with an integral value (100.0), in [min, max].
  bool integer(std::string_view key, int64_t& out, int64_t min, int64_t max);
  // A finite JSON number in [min, max].
  bool number(std::string_view key, double& out, double min, double max);

  // A required field that is absent: records missing_required_parameter.
  void missing(std::string_view key);

  // Records an error (only the first is kept).
  void fail(ApiError error) {
    if (!error_) error_ = std::move(error);
  }
  bool failed() const { return error_.has_value(); }
  const ApiError& error() const { return *error_; }
  ApiError takeError() { return std::move(*error_); }

 private:
  const json& object_;
  std::string prefix_;
  std::optional<ApiError> error_;
};

// Validates a standalone value (an array element) the same way.
std::optional<ApiError> checkInteger(const json& value, const std::string& param, int64_t min, int64_t max,
                                     int64_t& out);

}  // namespace lg::proxy::openai::detail
