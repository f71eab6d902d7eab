#include "text/grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "text/grammar/regex.h"

namespace lg::text::grammar {

namespace {

using Frag = AutomatonBuilder::Frag;

const std::set<std::string_view>& annotations() {
  static const std::set<std::string_view> k{"title",    "description", "default",    "examples",        "$schema",
                                            "$id",      "id",          "$comment",   "deprecated",      "readOnly",
                                            "writeOnly", "$defs",      "definitions", "contentMediaType", "contentEncoding",
                                            "strict"};
  return k;
}

const std::set<std::string_view>& supported() {
  static const std::set<std::string_view> k{
      "type",     "properties", "required",  "additionalProperties", "enum",     "const",     "anyOf",
      "oneOf",    "allOf",      "$ref",      "items",                "prefixItems", "additionalItems", "minItems",
      "maxItems", "minLength",  "maxLength", "pattern",              "format",   "minimum",   "maximum",
      "exclusiveMinimum", "exclusiveMaximum", "nullable", "uniqueItems"};
  return k;
}

// The OpenAI-listed string formats, as patterns over the string's content.
const char* formatPattern(std::string_view f) {
  if (f == "date") return "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
  if (f == "time") return "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  if (f == "date-time") {
    return "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)"
           "(\\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  }
  if (f == "duration") {
    return "P([0-9]+W|([0-9]+Y([0-9]+M)?([0-9]+D)?|[0-9]+M([0-9]+D)?|[0-9]+D)(T([0-9]+H([0-9]+M)?([0-9]+S)?|[0-9]+M("
           "[0-9]+S)?|[0-9]+S))?|T([0-9]+H([0-9]+M)?([0-9]+S)?|[0-9]+M([0-9]+S)?|[0-9]+S))";
  }
  if (f == "email") {
    return "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
           "(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+";
  }
  if (f == "hostname") return "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*";
  if (f == "ipv4") return "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  if (f == "ipv6") {
    return "(([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,7}:|([0-9a-fA-F]{1,4}:){1,6}:[0-9a-fA-F]{1,4}|"
           "([0-9a-fA-F]{1,4}:){1,5}(:[0-9a-fA-F]{1,4}){1,2}|([0-9a-fA-F]{1,4}:){1,4}(:[0-9a-fA-F]{1,4}){1,3}|"
           "([0-9a-fA-F]{1,4}:){1,3}(:[0-9a-fA-F]{1,4}){1,4}|([0-9a-fA-F]{1,4}:){1,2}(:[0-9a-fA-F]{1,4}){1,5}|"
           "[0-9a-fA-F]{1,4}:(:[0-9a-fA-F]{1,4}){1,6}|:((:[0-9a-fA-F]{1,4}){1,7}|:))";
  }
  if (f == "uuid") return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  return nullptr;
}

// Type bits: integer is part of number.
enum : uint8_t { kNull = 1, kBool = 2, kNumber = 4, kString = 8, kArray = 16, kObject = 32, kAll = 63 };
uint8_t typeBit(std::string_view t) {
  if (t == "null") return kNull;
  if (t == "boolean") return kBool;
  if (t == "number" || t == "integer") return kNumber;
  if (t == "string") return kString;
  if (t == "array") return kArray;
  if (t == "object") return kObject;
  return 0;
}
uint8_t valueType(const Json& v) {
  if (v.is_null()) return kNull;
  if (v.is_boolean()) return kBool;
  if (v.is_number()) return kNumber;
  if (v.is_string()) return kString;
  if (v.is_array()) return kArray;
  return kObject;
}
bool valueMatchesType(const Json& v, std::string_view t) {
  if (t == "integer") {
    return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  }
  return valueType(v) == typeBit(t);
}

std::string digitsOf(uint64_t v) { return std::to_string(v); }

}  // namespace

std::string jsonPointerEscape(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

// ---------------- JsonRules ----------------

Frag JsonRules::ws() {
  if (limits_.max_whitespace <= 0) return b_.empty();
  return b_.repeat(
      [&] { return b_.alt({b_.range(' ', ' '), b_.range('\t', '\n'), b_.range('\r', '\r')}); }, 0,
      limits_.max_whitespace);
}

void JsonRules::build() {
  if (built_) return;
  built_ = true;
  value_ = b_.newRule("json_value");
  object_ = b_.newRule("json_object");
  array_ = b_.newRule("json_array");
  string_ = b_.newRule("json_string");
  number_ = b_.newRule("json_number");
  b_.defineRule(string_, b_.seq({b_.literal("\""), b_.star(jsonStringChar(b_)), b_.literal("\"")}));
  Frag num;
  compileRegex(b_, "-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]{1,2})?", CharEncoding::kRaw, false, &num);
  b_.defineRule(number_, num);
  auto pair = [&] { return b_.seq({ws(), b_.call(string_), ws(), b_.literal(":"), ws(), b_.call(value_)}); };
  Frag members = b_.opt(b_.seq(pair(), b_.star(b_.seq({ws(), b_.literal(","), pair()}))));
  b_.defineRule(object_, b_.seq({b_.literal("{"), members, ws(), b_.literal("}")}));
  auto elem = [&] { return b_.seq(ws(), b_.call(value_)); };
  Frag elems = b_.opt(b_.seq(elem(), b_.star(b_.seq({ws(), b_.literal(","), elem()}))));
  b_.defineRule(array_, b_.seq({b_.literal("["), elems, ws(), b_.literal("]")}));
  b_.defineRule(value_, b_.alt({b_.call(object_), b_.call(array_), b_.call(string_), b_.call(number_),
                                b_.literal("true"), b_.literal("false"), b_.literal("null")}));
}

uint32_t JsonRules::anyValue() { return build(), value_; }
uint32_t JsonRules::anyObject() { return build(), object_; }
uint32_t JsonRules::string() { return build(), string_; }
uint32_t JsonRules::number() { return build(), number_; }

// ---------------- SchemaCompiler ----------------

SchemaCompiler::SchemaCompiler(AutomatonBuilder& b, JsonRules& rules, const Json& root, const Limits& limits,
                               std::string path_prefix)
    : b_(b), rules_(rules), root_(root), limits_(limits), prefix_(std::move(path_prefix)) {}

Frag SchemaCompiler::fail(std::string keyword, const std::string& path, std::string message) {
  if (!error_) error_ = GrammarError{std::move(keyword), prefix_ + path, std::move(message)};
  return b_.never();
}

std::variant<uint32_t, GrammarError> SchemaCompiler::compile() {
  const uint32_t r = ruleFor(root_, "", 0);
  if (error_) return *error_;
  return r;
}

uint32_t SchemaCompiler::ruleFor(const Json& schema, const std::string& path, int depth) {
  std::string key = schema.dump();
  auto it = by_text_.find(key);
  if (it != by_text_.end()) return it->second;
  const uint32_t r = b_.newRule(prefix_ + path);
  // The keyword that holds the subschema: the last path segment that is not an index.
  std::string keyword;
  for (size_t end = path.size(); end > 0 && keyword.empty();) {
    const size_t slash = path.rfind('/', end - 1);
    const std::string seg = path.substr(slash + 1, end - slash - 1);
    if (seg.empty() || seg.find_first_not_of("0123456789") != std::string::npos) keyword = seg;
    if (slash == std::string::npos || slash == 0) break;
    end = slash;
  }
  b_.setOrigin(r, keyword, prefix_ + path);
  by_text_.emplace(std::move(key), r);
  b_.defineRule(r, schemaFrag(schema, path, depth));
  return r;
}

const Json* SchemaCompiler::resolveRef(const std::string& ref, const std::string& path) {
  if (ref.empty() || ref[0] != '#') {
    fail("$ref", path, "only references inside the schema ('#...') are supported: '" + ref + "'");
    return nullptr;
  }
  const Json* cur = &root_;
  std::string rest = ref.substr(1);
  if (!rest.empty() && rest[0] != '/') {
    fail("$ref", path, "anchor references are not supported: '" + ref + "'");
    return nullptr;
  }
  size_t pos = 0;
  while (pos < rest.size()) {
    size_t next = rest.find('/', pos + 1);
    if (next == std::string::npos) next = rest.size();
    std::string token;
    for (size_t i = pos + 1; i < next; ++i) {
      if (rest[i] == '~' && i + 1 < next) {
        token += rest[i + 1] == '1' ? '/' : '~';
        ++i;
      } else if (rest[i] == '%' && i + 2 < next + 0 && i + 2 < rest.size()) {
        token += static_cast<char>(std::stoi(rest.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        token += rest[i];
      }
    }
    pos = next;
    if (cur->is_object() && cur->contains(token)) {
      cur = &(*cur)[token];
    } else if (cur->is_array() && !token.empty() &&
               std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
               std::stoul(token) < cur->size()) {
      cur = &(*cur)[std::stoul(token)];
    } else {
      fail("$ref", path, "reference '" + ref + "' does not resolve in the schema");
      return nullptr;
    }
  }
  return cur;
}

Frag SchemaCompiler::literalValue(const Json& v) { return b_.literal(v.dump()); }

std::optional<Json> SchemaCompiler::mergeAllOf(const Json& s, const std::string& path) {
  Json out = Json::object();
  for (auto& [k, v] : s.items()) {
    if (k != "allOf") out[k] = v;
  }
  std::optional<std::set<std::string>> closed;  // keys allowed by additionalProperties: false
  if (out.contains("additionalProperties") && out["additionalProperties"] == false) {
    closed.emplace();
    if (out.contains("properties")) {
      for (auto& [k, v] : out["properties"].items()) closed->insert(k);
    }
  }
  std::vector<Json> parts;
  for (const Json& sub0 : s["allOf"]) parts.push_back(sub0);
  for (size_t i = 0; i < parts.size(); ++i) {
    Json sub = parts[i];
    for (int guard = 0; sub.is_object() && sub.contains("$ref") && guard < 16; ++guard) {
      const Json* t = resolveRef(sub["$ref"].get<std::string>(), path + "/allOf");
      if (!t) return std::nullopt;
      Json rest = sub;
      rest.erase("$ref");
      sub = *t;
      if (!rest.empty() && sub.is_object()) parts.push_back(rest);
    }
    if (sub.is_boolean()) {
      if (!sub.get<bool>()) {
        fail("allOf", path + "/allOf/" + std::to_string(i), "a false schema in allOf: nothing matches");
        return std::nullopt;
      }
      continue;
    }
    if (!sub.is_object()) {
      fail("allOf", path + "/allOf/" + std::to_string(i), "not a schema");
      return std::nullopt;
    }
    if (sub.contains("allOf")) {
      for (const Json& x : sub["allOf"]) parts.push_back(x);
      sub.erase("allOf");
    }
    if (sub.contains("additionalProperties") && sub["additionalProperties"] == false) {
      std::set<std::string> keys;
      if (sub.contains("properties")) {
        for (auto& [k, v] : sub["properties"].items()) keys.insert(k);
      }
      if (closed) {
        std::set<std::string> both;
        for (const std::string& k : keys) {
          if (closed->count(k)) both.insert(k);
        }
        closed = both;
      } else {
        closed = keys;
      }
    }
    for (auto& [k, v] : sub.items()) {
      const std::string kpath = path + "/allOf/" + std::to_string(i) + "/" + jsonPointerEscape(k);
      if (annotations().count(k)) continue;
      if (!out.contains(k)) {
        out[k] = v;
        continue;
      }
      Json& cur = out[k];
      if (cur == v) continue;
      if (k == "properties") {
        for (auto& [pk, pv] : v.items()) {
          if (!cur.contains(pk)) {
            cur[pk] = pv;
          } else if (cur[pk] != pv) {
            cur[pk] = Json{{"allOf", Json::array({cur[pk], pv})}};
          }
        }
      } else if (k == "required") {
        for (const Json& r : v) {
          if (std::find(cur.begin(), cur.end(), r) == cur.end()) cur.push_back(r);
        }
      } else if (k == "type") {
        auto asList = [](const Json& t) {
          std::vector<std::string> l;
          if (t.is_string()) l.push_back(t.get<std::string>());
          if (t.is_array()) {
            for (const Json& x : t) l.push_back(x.get<std::string>());
          }
          return l;
        };
        std::vector<std::string> a = asList(cur), b = asList(v), both;
        for (const std::string& x : a) {
          for (const std::string& y : b) {
            if (x == y) both.push_back(x);
            else if (x == "integer" && y == "number") both.push_back(x);
            else if (x == "number" && y == "integer") both.push_back(y);
          }
        }
        if (both.empty()) {
          fail("allOf", kpath, "the subschemas' types do not intersect");
          return std::nullopt;
        }
        cur = Json(both);
      } else if (k == "additionalProperties" && (cur == false || v == false)) {
        cur = false;
      } else if (cur.is_number() && v.is_number() &&
                 (k == "minimum" || k == "minLength" || k == "minItems" || k == "exclusiveMinimum")) {
        if (v.get<double>() > cur.get<double>()) cur = v;
      } else if (cur.is_number() && v.is_number() &&
                 (k == "maximum" || k == "maxLength" || k == "maxItems" || k == "exclusiveMaximum")) {
        if (v.get<double>() < cur.get<double>()) cur = v;
      } else {
        fail("allOf", kpath, "cannot combine '" + k + "' from several allOf subschemas");
        return std::nullopt;
      }
    }
  }
  if (closed) {
    out["additionalProperties"] = false;
    if (out.contains("properties")) {
      Json kept = Json::object();
      for (auto& [k, v] : out["properties"].items()) {
        if (closed->count(k)) kept[k] = v;
      }
      out["properties"] = kept;
    }
  }
  return out;
}

Frag SchemaCompiler::schemaFrag(const Json& s, const std::string& path, int depth) {
  if (failed()) return b_.never();
  if (depth > limits_.max_depth) {
    return fail("(depth)", path, "the schema nests deeper than " + std::to_string(limits_.max_depth) + " levels");
  }
  if (s.is_boolean()) return s.get<bool>() ? b_.call(rules_.anyValue()) : b_.never();
  if (!s.is_object()) return fail("(schema)", path, "a schema must be an object or a boolean");
  for (auto& [k, v] : s.items()) {
    if (!annotations().count(k) && !supported().count(k)) {
      return fail(k, path + "/" + jsonPointerEscape(k), "unsupported keyword '" + k + "'");
    }
  }
  if (s.contains("uniqueItems") && s["uniqueItems"] != false) {
    return fail("uniqueItems", path + "/uniqueItems", "uniqueItems: true is not supported");
  }
  if (s.contains("$ref")) {
    for (auto& [k, v] : s.items()) {
      if (k != "$ref" && !annotations().count(k)) {
        return fail("$ref", path + "/$ref", "$ref with sibling keyword '" + k + "' is not supported");
      }
    }
    if (!s["$ref"].is_string()) return fail("$ref", path + "/$ref", "$ref must be a string");
    const Json* target = resolveRef(s["$ref"].get<std::string>(), path + "/$ref");
    if (!target) return b_.never();
    const std::string ref = s["$ref"].get<std::string>();
    const uint32_t r = ruleFor(*target, ref.size() > 1 ? ref.substr(1) : "", depth + 1);
    return b_.call(r);
  }
  if (s.contains("allOf")) {
    if (!s["allOf"].is_array() || s["allOf"].empty()) return fail("allOf", path + "/allOf", "must be a non-empty array");
    std::optional<Json> merged = mergeAllOf(s, path);
    if (!merged) return b_.never();
    return schemaFrag(*merged, path, depth + 1);
  }
  if (s.contains("anyOf") || s.contains("oneOf")) {
    if (s.contains("anyOf") && s.contains("oneOf")) return fail("oneOf", path + "/oneOf", "anyOf with oneOf is not supported");
    const std::string kw = s.contains("anyOf") ? "anyOf" : "oneOf";
    const Json& branches = s[kw];
    if (!branches.is_array() || branches.empty()) return fail(kw, path + "/" + kw, "must be a non-empty array");
    Json siblings = Json::object();
    for (auto& [k, v] : s.items()) {
      if (k != kw && !annotations().count(k)) siblings[k] = v;
    }
    std::vector<Json> alts;
    for (const Json& br : branches) {
      if (siblings.empty()) {
        alts.push_back(br);
      } else {
        alts.push_back(Json{{"allOf", Json::array({siblings, br})}});
      }
    }
    if (kw == "oneOf") {
      // Accepted as anyOf only when the alternatives cannot overlap.
      std::function<uint8_t(const Json&, int)> types = [&](const Json& x, int d) -> uint8_t {
        if (d > 8 || !x.is_object()) return x == false ? uint8_t{0} : uint8_t{kAll};
        if (x.contains("$ref") && x["$ref"].is_string()) {
          std::optional<GrammarError> saved = error_;
          const Json* t = resolveRef(x["$ref"].get<std::string>(), path);
          error_ = saved;
          return t ? types(*t, d + 1) : uint8_t{kAll};
        }
        uint8_t t = kAll;
        if (x.contains("const")) t &= valueType(x["const"]);
        if (x.contains("enum") && x["enum"].is_array()) {
          uint8_t e = 0;
          for (const Json& v : x["enum"]) e |= valueType(v);
          t &= e;
        }
        if (x.contains("type")) {
          uint8_t tt = 0;
          if (x["type"].is_string()) tt = typeBit(x["type"].get<std::string>());
          if (x["type"].is_array()) {
            for (const Json& y : x["type"]) tt |= y.is_string() ? typeBit(y.get<std::string>()) : 0;
          }
          if (x.contains("nullable") && x["nullable"] == true) tt |= kNull;
          t &= tt;
        }
        if (x.contains("anyOf") || x.contains("oneOf")) {
          uint8_t u = 0;
          for (const Json& y : x.contains("anyOf") ? x["anyOf"] : x["oneOf"]) u |= types(y, d + 1);
          t &= u;
        }
        if (x.contains("allOf")) {
          for (const Json& y : x["allOf"]) t &= types(y, d + 1);
        }
        return t;
      };
      auto discriminated = [&](const Json& a, const Json& b) {
        // Objects told apart by a required property with disjoint const/enum values.
        auto values = [](const Json& x, const std::string& p) -> std::optional<std::vector<Json>> {
          if (!x.is_object() || !x.contains("properties") || !x["properties"].contains(p)) return std::nullopt;
          if (!x.contains("required") || std::find(x["required"].begin(), x["required"].end(), p) == x["required"].end()) {
            return std::nullopt;
          }
          const Json& ps = x["properties"][p];
          if (!ps.is_object()) return std::nullopt;
          if (ps.contains("const")) return std::vector<Json>{ps["const"]};
          if (ps.contains("enum") && ps["enum"].is_array()) return std::vector<Json>(ps["enum"].begin(), ps["enum"].end());
          return std::nullopt;
        };
        if (!a.is_object() || !a.contains("properties") || !a["properties"].is_object()) return false;
        for (auto& [p, unused] : a["properties"].items()) {
          auto va = values(a, p), vb = values(b, p);
          if (!va || !vb) continue;
          bool overlap = false;
          for (const Json& x : *va) {
            for (const Json& y : *vb) overlap |= x == y;
          }
          if (!overlap) return true;
        }
        return false;
      };
      for (size_t i = 0; i < alts.size(); ++i) {
        for (size_t j = i + 1; j < alts.size(); ++j) {
          if ((types(branches[i], 0) & types(branches[j], 0)) == 0) continue;
          if (discriminated(branches[i], branches[j])) continue;
          return fail("oneOf", path + "/oneOf",
                      "oneOf is supported when its alternatives are disjoint (different types or a required "
                      "property with different const/enum values); alternatives " +
                          std::to_string(i) + " and " + std::to_string(j) + " may overlap");
        }
      }
    }
    std::vector<Frag> frags;
    for (size_t i = 0; i < alts.size(); ++i) {
      frags.push_back(b_.call(ruleFor(alts[i], path + "/" + kw + "/" + std::to_string(i), depth + 1)));
      if (failed()) return b_.never();
    }
    return b_.alt(frags);
  }

  std::vector<std::string> types;
  if (s.contains("type")) {
    const Json& t = s["type"];
    if (t.is_string()) {
      types.push_back(t.get<std::string>());
    } else if (t.is_array()) {
      for (const Json& x : t) {
        if (!x.is_string()) return fail("type", path + "/type", "type names must be strings");
        types.push_back(x.get<std::string>());
      }
    } else {
      return fail("type", path + "/type", "type must be a string or an array");
    }
    for (const std::string& x : types) {
      if (!typeBit(x)) return fail("type", path + "/type", "unknown type '" + x + "'");
    }
    if (s.contains("nullable") && s["nullable"] == true &&
        std::find(types.begin(), types.end(), "null") == types.end()) {
      types.push_back("null");
    }
  }

  if (s.contains("const") || s.contains("enum")) {
    std::vector<Json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array()) return fail("enum", path + "/enum", "enum must be an array");
      std::vector<Json> e(s["enum"].begin(), s["enum"].end());
      if (s.contains("const")) {
        values.erase(std::remove_if(values.begin(), values.end(),
                                    [&](const Json& v) { return std::find(e.begin(), e.end(), v) == e.end(); }),
                     values.end());
      } else {
        values = e;
      }
    }
    for (auto& [k, v] : s.items()) {
      if (k != "const" && k != "enum" && k != "type" && k != "nullable" && !annotations().count(k)) {
        return fail(k, path + "/" + jsonPointerEscape(k), "'" + k + "' together with enum/const is not supported");
      }
    }
    std::vector<Frag> alts;
    for (const Json& v : values) {
      bool ok = types.empty();
      for (const std::string& t : types) ok |= valueMatchesType(v, t);
      if (ok) alts.push_back(literalValue(v));
    }
    if (alts.empty()) return fail(s.contains("enum") ? "enum" : "const", path, "no value of enum/const is allowed by the schema");
    return b_.alt(alts);
  }

  if (types.empty()) {
    types = {"object", "array", "string", "number", "boolean", "null"};
    if (s.contains("nullable") && s["nullable"] == false) {
      // OpenAPI's nullable: false is the default; it changes nothing here.
    }
  }
  std::vector<Frag> alts;
  for (const std::string& t : types) {
    alts.push_back(typed(t, s, path, depth));
    if (failed()) return b_.never();
  }
  return alts.size() == 1 ? alts[0] : b_.alt(alts);
}

Frag SchemaCompiler::typed(const std::string& t, const Json& s, const std::string& path, int depth) {
  if (t == "null") return b_.literal("null");
  if (t == "boolean") return b_.alt({b_.literal("true"), b_.literal("false")});
  if (t == "string") return stringFrag(s, path);
  if (t == "integer") return integerFrag(s, path);
  if (t == "number") return numberFrag(s, path);
  if (t == "array") return arrayFrag(s, path, depth);
  return objectFrag(s, path, depth);
}

Frag SchemaCompiler::stringFrag(const Json& s, const std::string& path) {
  const bool has_pattern = s.contains("pattern"), has_format = s.contains("format");
  const bool has_len = s.contains("minLength") || s.contains("maxLength");
  auto count = [&](const char* k, int64_t def) -> std::optional<int64_t> {
    if (!s.contains(k)) return def;
    const Json& v = s[k];
    if (!v.is_number() || v.get<double>() < 0 || std::floor(v.get<double>()) != v.get<double>()) {
      fail(k, path + "/" + k, std::string(k) + " must be a non-negative integer");
      return std::nullopt;
    }
    return static_cast<int64_t>(std::min(v.get<double>(), 1e9));
  };
  if (has_format && has_pattern) return fail("format", path + "/format", "format together with pattern is not supported");
  if ((has_format || has_pattern) && has_len) {
    const char* k = s.contains("minLength") ? "minLength" : "maxLength";
    return fail(k, path + "/" + k, std::string(k) + " together with pattern or format is not supported");
  }
  if (has_pattern) {
    if (!s["pattern"].is_string()) return fail("pattern", path + "/pattern", "pattern must be a string");
    Frag content;
    if (auto err = compileRegex(b_, s["pattern"].get<std::string>(), CharEncoding::kJsonString, true, &content)) {
      return fail("pattern", path + "/pattern", *err);
    }
    return b_.seq({b_.literal("\""), content, b_.literal("\"")});
  }
  if (has_format) {
    const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
    const char* re = formatPattern(f);
    if (!re) return fail("format", path + "/format", "unsupported format '" + f + "'");
    Frag content;
    compileRegex(b_, re, CharEncoding::kJsonString, false, &content);
    return b_.seq({b_.literal("\""), content, b_.literal("\"")});
  }
  const auto min = count("minLength", 0), max = count("maxLength", -1);
  if (!min || !max) return b_.never();
  if (*max >= 0 && *min > *max) return fail("minLength", path + "/minLength", "minLength is greater than maxLength");
  if (*min == 0 && *max < 0) return b_.call(rules_.string());
  if (static_cast<size_t>(std::max(*min, *max)) * 48 > limits_.max_nfa_states) {
    return fail(*max > *min ? "maxLength" : "minLength", path, "string length bound too large for Limits::max_nfa_states");
  }
  return b_.seq({b_.literal("\""), b_.repeat([&] { return jsonStringChar(b_); }, *min, *max), b_.literal("\"")});
}

namespace {

// Digit strings of equal length between lo and hi (inclusive, lo <= hi).
Frag sameLength(AutomatonBuilder& b, const std::string& lo, const std::string& hi) {
  if (lo.empty()) return b.empty();
  const std::string rest_lo = lo.substr(1), rest_hi = hi.substr(1);
  const bool lo_min = rest_lo.find_first_not_of('0') == std::string::npos;
  const bool hi_max = rest_hi.find_first_not_of('9') == std::string::npos;
  auto digits = [&](size_t n) { return b.repeat([&] { return b.range('0', '9'); }, static_cast<int64_t>(n), static_cast<int64_t>(n)); };
  if (lo[0] == hi[0]) return b.seq(b.range(static_cast<uint8_t>(lo[0]), static_cast<uint8_t>(lo[0])), sameLength(b, rest_lo, rest_hi));
  if (lo_min && hi_max) return b.seq(b.range(static_cast<uint8_t>(lo[0]), static_cast<uint8_t>(hi[0])), digits(rest_lo.size()));
  std::vector<Frag> alts;
  char first_mid = lo[0], last_mid = hi[0];
  if (!lo_min) {
    alts.push_back(b.seq(b.range(static_cast<uint8_t>(lo[0]), static_cast<uint8_t>(lo[0])),
                         sameLength(b, rest_lo, std::string(rest_lo.size(), '9'))));
    ++first_mid;
  }
  if (!hi_max) {
    alts.push_back(b.seq(b.range(static_cast<uint8_t>(hi[0]), static_cast<uint8_t>(hi[0])),
                         sameLength(b, std::string(rest_hi.size(), '0'), rest_hi)));
    --last_mid;
  }
  if (first_mid <= last_mid) {
    alts.push_back(b.seq(b.range(static_cast<uint8_t>(first_mid), static_cast<uint8_t>(last_mid)), digits(rest_lo.size())));
  }
  return b.alt(alts);
}

// Decimal integers without leading zeros in [lo, hi] (hi: nullopt = unbounded).
Frag unsignedRange(AutomatonBuilder& b, uint64_t lo, std::optional<uint64_t> hi) {
  std::vector<Frag> alts;
  const std::string slo = digitsOf(lo);
  const size_t max_len = hi ? digitsOf(*hi).size() : slo.size();
  for (size_t len = slo.size(); len <= max_len; ++len) {
    const std::string low = len == slo.size() ? slo : "1" + std::string(len - 1, '0');
    std::string high = std::string(len, '9');
    if (hi && len == max_len) high = digitsOf(*hi);
    if (low.size() == high.size() && low <= high) alts.push_back(sameLength(b, low, high));
  }
  if (!hi) {
    alts.push_back(b.seq({b.range('1', '9'), b.repeat([&] { return b.range('0', '9'); }, static_cast<int64_t>(slo.size()), -1)}));
  }
  if (alts.empty()) return b.never();
  return alts.size() == 1 ? alts[0] : b.alt(alts);
}

}  // namespace

Frag SchemaCompiler::integerFrag(const Json& s, const std::string& path) {
  std::optional<double> lo, hi;
  auto num = [&](const char* k) -> std::optional<double> {
    if (!s.contains(k)) return std::nullopt;
    if (s[k].is_boolean()) return std::nullopt;
    if (!s[k].is_number()) {
      fail(k, path + "/" + k, std::string(k) + " must be a number");
      return std::nullopt;
    }
    return s[k].get<double>();
  };
  if (auto v = num("minimum")) lo = std::ceil(*v);
  if (auto v = num("maximum")) hi = std::floor(*v);
  if (auto v = num("exclusiveMinimum")) lo = std::max(lo.value_or(-1e300), std::floor(*v) + 1);
  if (auto v = num("exclusiveMaximum")) hi = std::min(hi.value_or(1e300), std::ceil(*v) - 1);
  // Draft 4: boolean exclusive flags modify minimum/maximum.
  if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"] == true && s.contains("minimum")) {
    const double m = s["minimum"].get<double>();
    lo = std::floor(m) + 1;
  }
  if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"] == true && s.contains("maximum")) {
    const double m = s["maximum"].get<double>();
    hi = std::ceil(m) - 1;
  }
  if (failed()) return b_.never();
  if (!lo && !hi) {
    // At most 18 digits: every value fits in a signed 64-bit integer, which
    // consumers (nlohmann::json among them) parse as an integer.
    return b_.seq(b_.opt(b_.literal("-")),
                  b_.alt({b_.literal("0"), b_.seq(b_.range('1', '9'), b_.repeat([&] { return b_.range('0', '9'); }, 0, 17))}));
  }
  constexpr double kLimit = 9.0e18;
  if ((lo && std::fabs(*lo) > kLimit) || (hi && std::fabs(*hi) > kLimit)) {
    return fail(lo ? "minimum" : "maximum", path, "integer bounds beyond 9e18 are not supported");
  }
  if (lo && hi && *lo > *hi) return fail("minimum", path + "/minimum", "no integer lies between the bounds");
  std::vector<Frag> alts;
  const std::optional<int64_t> l = lo ? std::optional<int64_t>(static_cast<int64_t>(*lo)) : std::nullopt;
  const std::optional<int64_t> h = hi ? std::optional<int64_t>(static_cast<int64_t>(*hi)) : std::nullopt;
  // Non-negative part.
  if (!h || *h >= 0) {
    const uint64_t a = l && *l > 0 ? static_cast<uint64_t>(*l) : 0;
    alts.push_back(unsignedRange(b_, a, h ? std::optional<uint64_t>(static_cast<uint64_t>(*h)) : std::nullopt));
  }
  // Negative part: -v for v in [max(1, -h), -l].
  if (!l || *l < 0) {
    const uint64_t a = h && *h < 0 ? static_cast<uint64_t>(-*h) : 1;
    const std::optional<uint64_t> bmax = l ? std::optional<uint64_t>(static_cast<uint64_t>(-*l)) : std::nullopt;
    alts.push_back(b_.seq(b_.literal("-"), unsignedRange(b_, a, bmax)));
  }
  return alts.size() == 1 ? alts[0] : b_.alt(alts);
}

Frag SchemaCompiler::numberFrag(const Json& s, const std::string& path) {
  if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum")) {
    // Bounded numbers are generated as integers in range: a subset of the
    // valid numbers (docs/grammar.md).
    return integerFrag(s, path);
  }
  return b_.call(rules_.number());
}

Frag SchemaCompiler::arrayFrag(const Json& s, const std::string& path, int depth) {
  std::vector<std::pair<const Json*, std::string>> prefix;
  Json rest_true = true;
  const Json* rest = &rest_true;
  std::string rest_path = path;
  if (s.contains("prefixItems")) {
    if (!s["prefixItems"].is_array()) return fail("prefixItems", path + "/prefixItems", "must be an array");
    for (size_t i = 0; i < s["prefixItems"].size(); ++i) {
      prefix.emplace_back(&s["prefixItems"][i], path + "/prefixItems/" + std::to_string(i));
    }
    if (s.contains("items")) rest = &s["items"], rest_path = path + "/items";
  } else if (s.contains("items") && s["items"].is_array()) {
    for (size_t i = 0; i < s["items"].size(); ++i) prefix.emplace_back(&s["items"][i], path + "/items/" + std::to_string(i));
    if (s.contains("additionalItems")) rest = &s["additionalItems"], rest_path = path + "/additionalItems";
  } else if (s.contains("items")) {
    rest = &s["items"], rest_path = path + "/items";
  }
  auto count = [&](const char* k, int64_t def) -> int64_t {
    if (!s.contains(k)) return def;
    const Json& v = s[k];
    if (!v.is_number() || v.get<double>() < 0) {
      fail(k, path + "/" + k, std::string(k) + " must be a non-negative integer");
      return 0;
    }
    return static_cast<int64_t>(std::min(v.get<double>(), 1e9));
  };
  const int64_t min = count("minItems", 0);
  int64_t max = count("maxItems", -1);
  if (failed()) return b_.never();
  const auto k = static_cast<int64_t>(prefix.size());
  const bool rest_false = rest->is_boolean() && !rest->get<bool>();
  if (rest_false) max = max < 0 ? k : std::min(max, k);
  if (max >= 0 && min > max) return fail("minItems", path + "/minItems", "minItems is greater than maxItems (or the items allowed)");
  const int64_t explicit_n = max >= 0 ? max : std::max(k, min);
  if (explicit_n > 4096) return fail(max >= 0 ? "maxItems" : "minItems", path, "item count bound too large (over 4096)");
  auto elem = [&](int64_t i) -> Frag {
    if (i < k) return b_.call(ruleFor(*prefix[static_cast<size_t>(i)].first, prefix[static_cast<size_t>(i)].second, depth + 1));
    return b_.call(ruleFor(*rest, rest_path, depth + 1));
  };
  auto sep = [&] { return b_.seq({rules_.ws(), b_.literal(","), rules_.ws()}); };
  Frag tail;
  if (max >= 0) {
    tail = b_.empty();
  } else if (explicit_n == 0) {
    tail = b_.opt(b_.seq(elem(0), b_.star(b_.seq(sep(), elem(0)))));
  } else {
    tail = b_.star(b_.seq(sep(), elem(explicit_n)));
  }
  for (int64_t i = explicit_n; i-- > 0;) {
    if (failed()) return b_.never();
    Frag item = i > 0 ? b_.seq(sep(), elem(i)) : elem(i);
    Frag f = b_.seq(item, tail);
    tail = i >= min ? b_.opt(f) : f;
  }
  return b_.seq({b_.literal("["), rules_.ws(), tail, rules_.ws(), b_.literal("]")});
}

Frag SchemaCompiler::objectFrag(const Json& s, const std::string& path, int depth) {
  std::vector<std::pair<std::string, std::pair<const Json*, std::string>>> props;
  Json additional_true = true;
  const Json* additional = &additional_true;
  if (s.contains("additionalProperties")) additional = &s["additionalProperties"];
  const bool closed = additional->is_boolean() && !additional->get<bool>();
  if (s.contains("properties")) {
    if (!s["properties"].is_object()) return fail("properties", path + "/properties", "must be an object");
    for (auto& [name, sub] : s["properties"].items()) {
      props.push_back({name, {&sub, path + "/properties/" + jsonPointerEscape(name)}});
    }
  }
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) return fail("required", path + "/required", "must be an array");
    for (const Json& r : s["required"]) {
      if (!r.is_string()) return fail("required", path + "/required", "names must be strings");
      const std::string name = r.get<std::string>();
      required.insert(name);
      const bool declared = std::any_of(props.begin(), props.end(), [&](const auto& p) { return p.first == name; });
      if (!declared) {
        if (closed) {
          return fail("required", path + "/required",
                      "required property '" + name + "' is not in properties and additionalProperties is false");
        }
        props.push_back({name, {additional, path + "/additionalProperties"}});
      }
    }
  }
  const size_t n = props.size();
  std::vector<Frag> a(n + 1), bt(n + 1);
  for (size_t i = 0; i <= n; ++i) a[i] = b_.empty(), bt[i] = b_.empty();
  auto link = [&](Frag from, Frag via, Frag to) {
    b_.seq(from, via);
    b_.seq(via, to);
  };
  for (size_t i = 0; i < n; ++i) {
    const auto& [name, sub] = props[i];
    const uint32_t value_rule = ruleFor(*sub.first, sub.second, depth + 1);
    if (failed()) return b_.never();
    auto pair = [&] {
      return b_.seq({rules_.ws(), b_.literal(Json(name).dump()), rules_.ws(), b_.literal(":"), rules_.ws(),
                     b_.call(value_rule)});
    };
    link(a[i], pair(), bt[i + 1]);
    link(bt[i], b_.seq({rules_.ws(), b_.literal(","), pair()}), bt[i + 1]);
    if (!required.count(name)) {
      b_.seq(a[i], a[i + 1]);
      b_.seq(bt[i], bt[i + 1]);
    }
  }
  if (!closed) {
    const uint32_t value_rule = ruleFor(*additional, path + "/additionalProperties", depth + 1);
    if (failed()) return b_.never();
    // Keys of additional properties: any string when nothing is declared;
    // else printable ASCII without escapes that is not a declared name.
    // Build the key fragment explicitly (a lambda returning a fragment whose
    // entry is the opening quote and exit is the closing quote).
    Frag key_frag;
    if (n == 0) {
      key_frag = b_.call(rules_.string());
    } else {
      struct Node {
        std::map<uint8_t, size_t> kids;
        bool name_end = false, mid = false;
      };
      std::vector<Node> trie(1);
      for (const auto& p : props) {
        const std::string enc = Json(p.first).dump();
        const std::string_view content(enc.data() + 1, enc.size() - 2);
        size_t cur = 0;
        int pending = 0;
        bool escape = false;
        for (char ch : content) {
          const auto c = static_cast<uint8_t>(ch);
          if (pending > 0) {
            --pending;
          } else if (escape) {
            escape = false;
            if (c == 'u') pending = 4;
          } else if (c == '\\') {
            escape = true;
          } else if (c >= 0xF0) {
            pending = 3;
          } else if (c >= 0xE0) {
            pending = 2;
          } else if (c >= 0xC0) {
            pending = 1;
          }
          auto it = trie[cur].kids.find(c);
          if (it == trie[cur].kids.end()) {
            trie.emplace_back();
            it = trie[cur].kids.emplace(c, trie.size() - 1).first;
          }
          cur = it->second;
          trie[cur].mid = pending > 0 || escape;
        }
        trie[cur].name_end = true;
      }
      std::vector<Frag> states(trie.size());
      for (Frag& f : states) f = b_.empty();
      Frag free_state = b_.empty(), open = b_.literal("\""), close = b_.literal("\"");
      auto allowed = [](int c) { return c >= 0x20 && c <= 0x7E && c != '"' && c != '\\'; };
      auto rangesTo = [&](Frag from, const std::map<uint8_t, size_t>* except, Frag to) {
        int start = -1;
        for (int c = 0; c <= 256; ++c) {
          const bool in = c < 256 && allowed(c) && !(except && except->count(static_cast<uint8_t>(c)));
          if (in && start < 0) start = c;
          if (!in && start >= 0) {
            link(from, b_.range(static_cast<uint8_t>(start), static_cast<uint8_t>(c - 1)), to);
            start = -1;
          }
        }
      };
      b_.seq(open, states[0]);
      rangesTo(free_state, nullptr, free_state);
      b_.seq(free_state, close);
      for (size_t t = 0; t < trie.size(); ++t) {
        for (auto [c, kid] : trie[t].kids) link(states[t], b_.range(c, c), states[kid]);
        if (!trie[t].mid) {
          rangesTo(states[t], &trie[t].kids, free_state);
          if (!trie[t].name_end) b_.seq(states[t], close);
        }
      }
      key_frag = Frag{open.in, close.out};
    }
    // The key fragment is used twice (first member or after a comma): wrap it in a rule.
    const uint32_t key_rule = b_.newRule(prefix_ + path + "/(additional key)");
    b_.defineRule(key_rule, key_frag);
    auto pair = [&] {
      return b_.seq({rules_.ws(), b_.call(key_rule), rules_.ws(), b_.literal(":"), rules_.ws(), b_.call(value_rule)});
    };
    link(a[n], pair(), bt[n]);
    link(bt[n], b_.seq({rules_.ws(), b_.literal(","), pair()}), bt[n]);
  }
  Frag end = b_.seq(rules_.ws(), b_.literal("}"));
  b_.seq(a[n], end);
  b_.seq(bt[n], end);
  Frag open = b_.literal("{");
  b_.seq(open, a[0]);
  return Frag{open.in, end.out};
}

}  // namespace lg::text::grammar
