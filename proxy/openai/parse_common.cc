#include "proxy/openai/parse_common.h"

#include <algorithm>
#include <limits>

namespace lg::proxy::openai::detail {

void readSampling(FieldReader& r, SamplingSpec& spec) {
  serving::SamplingOptions& s = spec.options;
  double d = 0;
  if (r.number("temperature", d, 0.0, 2.0)) s.temperature = static_cast<float>(d);
  if (r.number("top_p", d, 0.0, 1.0)) {
    // OpenAI accepts 0 (keep only the most likely token); the scheduler wants
    // (0, 1], and the smallest positive value keeps exactly that one token.
    s.top_p = d <= 0.0 ? std::numeric_limits<float>::min() : static_cast<float>(d);
  }
  int64_t i = 0;
  if (r.integer("seed", i, INT64_MIN, INT64_MAX)) s.seed = static_cast<uint64_t>(i);
  // top_k is no OpenAI field; vLLM and others accept it, and -1 means "no limit" there.
  if (r.integer("top_k", i, -1, 1 << 20)) s.top_k = i < 0 ? 0 : static_cast<int32_t>(i);
  if (r.number("frequency_penalty", d, -2.0, 2.0)) s.frequency_penalty = static_cast<float>(d);
  if (r.number("presence_penalty", d, -2.0, 2.0)) s.presence_penalty = static_cast<float>(d);
  // vLLM's extensions.
  if (r.number("repetition_penalty", d, 0.0, 2.0)) {
    if (d <= 0.0) {
      r.fail(invalidRequest(r.path("repetition_penalty"), "invalid_value",
                            r.path("repetition_penalty") + " must be in (0, 2], got " + std::to_string(d)));
    } else {
      s.repetition_penalty = static_cast<float>(d);
    }
  }
  if (r.number("min_p", d, 0.0, 1.0)) s.min_p = static_cast<float>(d);
  if (const json* bias = r.find("logit_bias"); bias != nullptr && !bias->is_null()) {
    const std::string param = r.path("logit_bias");
    if (!bias->is_object()) return r.fail(wrongType(param, "an object of token ids to numbers", *bias));
    if (bias->size() > 300) {
      return r.fail(invalidRequest(param, "invalid_value", param + " may name at most 300 tokens"));
    }
    for (const auto& [id_text, value] : bias->items()) {
      const std::string p = fieldPath(param, id_text);
      int64_t id = -1;
      const bool digits = !id_text.empty() && id_text.size() <= 9 &&
                          std::all_of(id_text.begin(), id_text.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (digits) id = std::stoll(id_text);
      if (!digits) return r.fail(invalidRequest(param, "invalid_value", param + " keys must be token ids, got '" + id_text.substr(0, 32) + "'"));
      if (!value.is_number()) return r.fail(wrongType(p, "a number", value));
      const double v = value.get<double>();
      if (!(v >= -100.0 && v <= 100.0)) {
        return r.fail(invalidRequest(p, "invalid_value", p + " must be in [-100, 100]"));
      }
      s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(v));
    }
  }
}

void readStop(FieldReader& r, const ParseLimits& limits, std::vector<std::string>& out) {
  if (r.failed()) return;
  const json* stop = r.find("stop");
  if (stop == nullptr) return;
  const std::string param = r.path("stop");
  if (stop->is_string()) {
    // OpenAI ignores an empty stop string rather than stopping at once.
    if (!stop->get_ref<const std::string&>().empty()) out.push_back(stop->get<std::string>());
    return;
  }
  if (!stop->is_array()) {
    r.fail(wrongType(param, "a string or an array of strings", *stop));
    return;
  }
  if (static_cast<int64_t>(stop->size()) > limits.max_stop_strings) {
    r.fail(invalidRequest(param, "invalid_value",
                          param + " may hold at most " + std::to_string(limits.max_stop_strings) +
                              " strings, got " + std::to_string(stop->size())));
    return;
  }
  for (size_t k = 0; k < stop->size(); ++k) {
    const json& s = (*stop)[k];
    if (!s.is_string()) {
      r.fail(wrongType(indexPath(param, k), "a string", s));
      return;
    }
    if (s.get_ref<const std::string&>().empty()) {
      r.fail(invalidRequest(indexPath(param, k), "invalid_value", indexPath(param, k) + " is empty"));
      return;
    }
    out.push_back(s.get<std::string>());
  }
}

void readMaxTokens(FieldReader& r, std::string_view key, int64_t min_value, SamplingSpec& spec) {
  int64_t v = 0;
  if (r.integer(key, v, min_value, INT32_MAX)) spec.requested_max_tokens = static_cast<int32_t>(v);
}

namespace {
bool isMediaPart(std::string_view type) {
  static constexpr std::string_view kMedia[] = {"image_url", "input_image", "input_audio", "audio",
                                                "file",      "input_file",  "image",       "video_url"};
  return std::find(std::begin(kMedia), std::end(kMedia), type) != std::end(kMedia);
}
}  // namespace

ApiResult<std::string> readTextContent(const json& content, const std::string& param, const TextPartTypes& types) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return wrongType(param, "a string or an array of content parts", content);
  std::string out;
  bool first = true;
  for (size_t k = 0; k < content.size(); ++k) {
    const json& part = content[k];
    const std::string part_path = indexPath(param, k);
    if (!part.is_object()) return wrongType(part_path, "an object", part);
    const auto type_it = part.find("type");
    if (type_it == part.end() || !type_it->is_string()) {
      return invalidRequest(fieldPath(part_path, "type"), "missing_required_parameter",
                            fieldPath(part_path, "type") + " must be a string naming the part's type");
    }
    const std::string& type = type_it->get_ref<const std::string&>();
    std::string_view text_key;
    if (std::find(types.text.begin(), types.text.end(), type) != types.text.end()) {
      text_key = "text";
    } else if (types.allow_refusal && type == "refusal") {
      text_key = "refusal";
    } else if (isMediaPart(type)) {
      return invalidRequest(fieldPath(part_path, "type"), "unsupported_value",
                            part_path + " is a '" + type +
                                "' part; this model reads text only (send text parts or a string)");
    } else {
      return invalidRequest(fieldPath(part_path, "type"), "invalid_value",
                            part_path + " has an unknown content part type '" + type + "'");
    }
    const auto text_it = part.find(text_key);
    if (text_it == part.end() || !text_it->is_string()) {
      const std::string p = fieldPath(part_path, text_key);
      return text_it == part.end() || text_it->is_null()
                 ? invalidRequest(p, "missing_required_parameter", "missing required parameter: " + p)
                 : wrongType(p, "a string", *text_it);
    }
    if (!first) out.push_back('\n');
    out.append(text_it->get_ref<const std::string&>());
    first = false;
  }
  return out;
}

std::optional<ApiError> checkFunctionName(const std::string& name, const std::string& param) {
  const bool ok = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  if (ok) return std::nullopt;
  return invalidRequest(param, "invalid_value",
                        param + " must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'");
}

ApiResult<FunctionTool> readFunction(const json& object, const std::string& prefix) {
  if (!object.is_object()) return wrongType(prefix, "an object", object);
  FieldReader r(object, prefix);
  FunctionTool tool;
  if (!r.string("name", tool.name) && !r.failed()) r.missing("name");
  r.string("description", tool.description);
  if (r.failed()) return r.takeError();
  if (auto error = checkFunctionName(tool.name, r.path("name"))) return *error;
  if (const json* params = r.find("parameters")) {
    if (!params->is_object()) return wrongType(r.path("parameters"), "an object (a JSON Schema)", *params);
    tool.parameters = *params;
  }
  r.boolean("strict", tool.strict);
  if (r.failed()) return r.takeError();
  return tool;
}

std::optional<ApiError> checkToolChoice(const ToolChoice& choice, const std::vector<FunctionTool>& tools,
                                        const std::string& param) {
  using Mode = ToolChoice::Mode;
  if ((choice.mode == Mode::kRequired || choice.mode == Mode::kFunction) && tools.empty()) {
    return invalidRequest(param, "invalid_value", param + " asks for a tool call, but the request has no tools");
  }
  if (choice.mode == Mode::kFunction &&
      std::none_of(tools.begin(), tools.end(), [&](const FunctionTool& t) { return t.name == choice.function; })) {
    return invalidRequest(param, "invalid_value",
                          param + " names the function '" + choice.function + "', which is not among the tools");
  }
  return std::nullopt;
}

ApiResult<ResponseFormat> readResponseFormat(const json& format, const std::string& param, bool flat) {
  if (!format.is_object()) return wrongType(param, "an object", format);
  const std::string type_param = fieldPath(param, "type");
  const auto it = format.find("type");
  if (it == format.end() || !it->is_string()) {
    return invalidRequest(type_param, "missing_required_parameter", type_param + " must be a string");
  }
  const std::string& type = it->get_ref<const std::string&>();
  ResponseFormat out;
  if (type == "text") return out;
  if (type == "json_object") {
    out.kind = ResponseFormat::Kind::kJsonObject;
    out.param = param;
    return out;
  }
  if (type != "json_schema") {
    return invalidRequest(type_param, "invalid_value",
                          type_param + " must be 'text', 'json_object' or 'json_schema', got '" + type + "'");
  }
  // Chat nests the schema's fields under "json_schema"; Responses has them beside "type".
  const std::string prefix = flat ? param : fieldPath(param, "json_schema");
  const json* holder = &format;
  if (!flat) {
    const auto js = format.find("json_schema");
    if (js == format.end()) {
      return invalidRequest(prefix, "missing_required_parameter", prefix + " is required with type 'json_schema'");
    }
    if (!js->is_object()) return wrongType(prefix, "an object", *js);
    holder = &*js;
  }
  FieldReader f(*holder, prefix);
  if (!f.string("name", out.name) && !f.failed()) f.missing("name");
  if (f.failed()) return f.takeError();
  if (auto error = checkFunctionName(out.name, f.path("name"))) return *error;
  std::string description;
  f.string("description", description);
  f.boolean("strict", out.strict);
  if (f.failed()) return f.takeError();
  out.param = f.path("schema");
  const json* schema = f.find("schema");
  if (schema == nullptr) {
    // OpenAI accepts a json_schema without one: any JSON value.
    out.schema = json::object();
  } else if (!schema->is_object() && !schema->is_boolean()) {
    return wrongType(out.param, "an object (a JSON Schema)", *schema);
  } else {
    out.schema = *schema;
  }
  out.kind = ResponseFormat::Kind::kJsonSchema;
  return out;
}

namespace {

// One vLLM structured-output constraint, `value` under `param`.
ApiResult<ResponseFormat> readStructuredValue(std::string_view kind, const json& value, const std::string& param) {
  ResponseFormat out;
  out.param = param;
  if (kind == "json") {
    out.kind = ResponseFormat::Kind::kJsonSchema;
    out.name = "structured_output";
    if (value.is_string()) {  // vLLM also takes the schema as JSON text
      out.schema = json::parse(value.get_ref<const std::string&>(), nullptr, false);
      if (out.schema.is_discarded()) {
        return invalidRequest(param, "invalid_value", param + " is neither a JSON Schema object nor its JSON text");
      }
    } else {
      out.schema = value;
    }
    if (!out.schema.is_object() && !out.schema.is_boolean()) return wrongType(param, "an object (a JSON Schema)", value);
    return out;
  }
  if (kind == "regex") {
    if (!value.is_string()) return wrongType(param, "a string", value);
    out.kind = ResponseFormat::Kind::kRegex;
    out.regex = value.get<std::string>();
    return out;
  }
  // choice
  if (!value.is_array() || value.empty()) return wrongType(param, "a non-empty array of strings", value);
  for (size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string()) return wrongType(indexPath(param, i), "a string", value[i]);
    out.choices.push_back(value[i].get<std::string>());
  }
  out.kind = ResponseFormat::Kind::kChoice;
  return out;
}

}  // namespace

ApiResult<std::optional<ResponseFormat>> readStructuredOutputs(FieldReader& r) {
  std::optional<ResponseFormat> found;
  auto take = [&](ApiResult<ResponseFormat> f) -> std::optional<ApiError> {
    if (!f) return f.error();
    if (found) {
      return invalidRequest(f->param, "invalid_value",
                            f->param + " and " + found->param + " both constrain the output; send one");
    }
    found = std::move(*f);
    return std::nullopt;
  };
  if (const json* so = r.find("structured_outputs"); so != nullptr && !so->is_null()) {
    if (!so->is_object()) return wrongType("structured_outputs", "an object", *so);
    for (const auto& [key, value] : so->items()) {
      const std::string param = "structured_outputs." + key;
      if (value.is_null()) continue;
      if (key == "json" || key == "regex" || key == "choice") {
        if (auto e = take(readStructuredValue(key, value, param))) return *e;
      } else if (key == "grammar" || key == "structural_tag" || key == "json_object") {
        if (key == "json_object" && value.is_boolean() && value.get<bool>()) {
          ResponseFormat any;
          any.kind = ResponseFormat::Kind::kJsonObject;
          any.param = param;
          if (auto e = take(any)) return *e;
          continue;
        }
        if (key == "json_object") continue;
        return invalidRequest(param, "unsupported_parameter",
                              param + " is not supported by this server; use json, regex or choice");
      } else if (key == "whitespace_pattern" || key == "disable_any_whitespace" || key == "disable_fallback" ||
                 key == "disable_additional_properties") {
        continue;  // the grammar engine's whitespace rule is fixed (docs/grammar.md)
      } else {
        return invalidRequest(param, "unknown_parameter", param + " is not a structured-output option");
      }
    }
  }
  for (std::string_view kind : {"json", "regex", "choice"}) {
    const std::string key = "guided_" + std::string(kind);
    if (const json* v = r.find(key); v != nullptr && !v->is_null()) {
      if (auto e = take(readStructuredValue(kind, *v, key))) return *e;
    }
  }
  if (const json* g = r.find("guided_grammar"); g != nullptr && !g->is_null()) {
    return invalidRequest("guided_grammar", "unsupported_parameter",
                          "guided_grammar is not supported by this server; use guided_json, guided_regex or guided_choice");
  }
  return found;
}

}  // namespace lg::proxy::openai::detail
