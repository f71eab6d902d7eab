#include "proxy/openai/json_fields.h"

#include <cmath>

namespace lg::proxy::openai::detail {

std::string_view typeName(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::binary: return "binary data";
    case json::value_t::discarded: return "invalid JSON";
  }
  return "an unknown type";
}

std::string fieldPath(std::string_view prefix, std::string_view key) {
  if (prefix.empty()) return std::string(key);
  std::string out;
  out.reserve(prefix.size() + 1 + key.size());
  out.append(prefix).append(".").append(key);
  return out;
}

std::string indexPath(std::string_view prefix, size_t index) {
  std::string out(prefix);
  out.append("[").append(std::to_string(index)).append("]");
  return out;
}

ApiError wrongType(const std::string& param, std::string_view expected, const json& got) {
  return invalidRequest(param, "invalid_type",
                        param + " must be " + std::string(expected) + ", got " + std::string(typeName(got)));
}

const json* FieldReader::find(std::string_view key) const {
  if (!object_.is_object()) return nullptr;
  const auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool FieldReader::string(std::string_view key, std::string& out) {
  if (failed()) return false;
  const json* v = find(key);
  if (v == nullptr) return false;
  if (!v->is_string()) {
    fail(wrongType(path(key), "a string", *v));
    return false;
  }
  out = v->get_ref<const std::string&>();
  return true;
}

bool FieldReader::boolean(std::string_view key, bool& out) {
  if (failed()) return false;
  const json* v = find(key);
  if (v == nullptr) return false;
  if (!v->is_boolean()) {
    fail(wrongType(path(key), "a boolean", *v));
    return false;
  }
  out = v->get<bool>();
  return true;
}

std::optional<ApiError> checkInteger(const json& value, const std::string& param, int64_t min, int64_t max,
                                     int64_t& out) {
  if (value.is_number_integer()) {
    out = value.get<int64_t>();
  } else if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    out = u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
  } else if (value.is_number_float()) {
    const double d = value.get<double>();
    // 100.0 is an integer to a JSON client; 100.5 is not.
    if (!std::isfinite(d) || d != std::floor(d)) {
      return wrongType(param, "an integer", value);
    }
    out = d >= 9.2e18 ? INT64_MAX : d <= -9.2e18 ? INT64_MIN : static_cast<int64_t>(d);
  } else {
    return wrongType(param, "an integer", value);
  }
  if (out < min) {
    return invalidRequest(param, "integer_below_min_value",
                          param + " must be at least " + std::to_string(min) + ", got " + std::to_string(out));
  }
  if (out > max) {
    return invalidRequest(param, "integer_above_max_value",
                          param + " must be at most " + std::to_string(max) + ", got " + std::to_string(out));
  }
  return std::nullopt;
}

bool FieldReader::integer(std::string_view key, int64_t& out, int64_t min, int64_t max) {
  if (failed()) return false;
  const json* v = find(key);
  if (v == nullptr) return false;
  if (auto error = checkInteger(*v, path(key), min, max, out)) {
    fail(std::move(*error));
    return false;
  }
  return true;
}

namespace {
std::string shortNumber(double d) {
  // Enough digits to tell the value apart, without printf's six trailing zeros.
  std::string s = json(d).dump();
  return s;
}
}  // namespace

bool FieldReader::number(std::string_view key, double& out, double min, double max) {
  if (failed()) return false;
  const json* v = find(key);
  if (v == nullptr) return false;
  if (!v->is_number()) {
    fail(wrongType(path(key), "a number", *v));
    return false;
  }
  out = v->get<double>();
  if (!std::isfinite(out) || out < min || out > max) {
    const std::string p = path(key);
    fail(invalidRequest(p, "invalid_value",
                        p + " must be between " + shortNumber(min) + " and " + shortNumber(max) + ", got " +
                            (std::isfinite(out) ? shortNumber(out) : std::string("a number out of range"))));
    return false;
  }
  return true;
}

void FieldReader::missing(std::string_view key) {
  const std::string p = path(key);
  fail(invalidRequest(p, "missing_required_parameter", "missing required parameter: " + p));
}

}  // namespace lg::proxy::openai::detail
