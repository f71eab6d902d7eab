// Reads a Hugging Face tokenizer.json into BpeTokenizer::Parts.
//
// Policy: anything that would make LatentGate's ids differ from the
// `tokenizers` library is an error. Unsupported features (a real normalizer,
// another model or pre-tokenizer type, dropout, byte fallback, unknown fields
// in the objects whose fields drive encoding) are Unimplemented and name the
// feature; malformed documents (wrong types, dangling merges, duplicate or
// out-of-range ids) are InvalidArgument and name the field.
#include <algorithm>
#include <initializer_list>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "text/tokenizer/bpe_tokenizer.h"
#include "text/tokenizer/byte_level.h"
#include "text/tokenizer/deepseek_v3_fast.h"
#include "common/utf8.h"

namespace lg::text {
namespace {

using nlohmann::json;

// Ids beyond this are rejected: no real vocabulary comes near, and a hostile
// file must not make the id tables huge.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

std::string typeName(const json& j) { return j.type_name(); }

Status unknownFields(const json& object, std::string_view where, std::initializer_list<std::string_view> known) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
      return unimplemented(std::string(where) + ": unknown field \"" + it.key() + "\"");
    }
  }
  return Status::ok();
}

Result<bool> boolField(const json& object, std::string_view where, const char* key, std::optional<bool> fallback) {
  auto it = object.find(key);
  if (it == object.end() || (it->is_null() && fallback)) {
    if (fallback) return *fallback;
    return invalidArgument(std::string(where) + ": missing \"" + key + "\"");
  }
  if (!it->is_boolean()) {
    return invalidArgument(std::string(where) + ": \"" + key + "\" must be a boolean, not " + typeName(*it));
  }
  return it->get<bool>();
}

Result<std::string> stringField(const json& object, std::string_view where, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) return invalidArgument(std::string(where) + ": missing \"" + key + "\"");
  if (!it->is_string()) {
    return invalidArgument(std::string(where) + ": \"" + key + "\" must be a string, not " + typeName(*it));
  }
  return it->get<std::string>();
}

Status checkObject(const json& j, std::string_view where) {
  if (!j.is_object()) return invalidArgument(std::string(where) + " must be an object, not " + typeName(j));
  return Status::ok();
}

// --- normalizer, post-processor, decoder --------------------------------------

Status checkNormalizer(const json& n, std::string_view where) {
  if (n.is_null()) return Status::ok();
  LG_RETURN_IF_ERROR(checkObject(n, where));
  LG_ASSIGN_OR_RETURN(std::string type, stringField(n, where, "type"));
  if (type != "Sequence") return unimplemented("normalizer \"" + type + "\" is not supported");
  LG_RETURN_IF_ERROR(unknownFields(n, where, {"type", "normalizers"}));
  auto it = n.find("normalizers");
  if (it == n.end() || !it->is_array()) return invalidArgument(std::string(where) + ": \"normalizers\" must be an array");
  for (const json& child : *it) LG_RETURN_IF_ERROR(checkNormalizer(child, std::string(where) + ".normalizers[]"));
  return Status::ok();
}

Status checkPostProcessor(const json& p) {
  // Post-processors only add special tokens and adjust offsets; encode never
  // asks for special tokens (as the goldens' add_special_tokens=False), so the
  // ones that do nothing else are accepted.
  if (p.is_null()) return Status::ok();
  LG_RETURN_IF_ERROR(checkObject(p, "post_processor"));
  LG_ASSIGN_OR_RETURN(std::string type, stringField(p, "post_processor", "type"));
  if (type == "Sequence") {
    auto it = p.find("processors");
    if (it == p.end() || !it->is_array()) return invalidArgument("post_processor: \"processors\" must be an array");
    for (const json& child : *it) LG_RETURN_IF_ERROR(checkPostProcessor(child));
    return Status::ok();
  }
  if (type == "ByteLevel" || type == "TemplateProcessing" || type == "RobertaProcessing" ||
      type == "BertProcessing") {
    return Status::ok();
  }
  return unimplemented("post_processor \"" + type + "\" is not supported");
}

Status checkDecoder(const json& d) {
  if (d.is_null()) return unimplemented("decoder null (tokens joined by spaces) is not supported");
  LG_RETURN_IF_ERROR(checkObject(d, "decoder"));
  LG_ASSIGN_OR_RETURN(std::string type, stringField(d, "decoder", "type"));
  if (type != "ByteLevel") return unimplemented("decoder \"" + type + "\" is not supported");
  // Its options only concern offsets; the ByteLevel decoder ignores them.
  return unknownFields(d, "decoder", {"type", "add_prefix_space", "trim_offsets", "use_regex"});
}

// --- pre-tokenizer -----------------------------------------------------------------

// The GPT-2 pattern of ByteLevel(use_regex=true).
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

Status parsePreTokenizer(const json& p, const std::string& where, std::vector<PreTokenizerStep>& steps,
                         std::vector<std::string>& sources) {
  LG_RETURN_IF_ERROR(checkObject(p, where));
  LG_ASSIGN_OR_RETURN(std::string type, stringField(p, where, "type"));
  if (type == "Sequence") {
    LG_RETURN_IF_ERROR(unknownFields(p, where, {"type", "pretokenizers"}));
    auto it = p.find("pretokenizers");
    if (it == p.end() || !it->is_array()) return invalidArgument(where + ": \"pretokenizers\" must be an array");
    for (size_t k = 0; k < it->size(); ++k) {
      LG_RETURN_IF_ERROR(parsePreTokenizer((*it)[k], where + ".pretokenizers[" + std::to_string(k) + "]", steps, sources));
    }
    return Status::ok();
  }
  PreTokenizerStep step;
  std::string source;
  if (type == "Split") {
    LG_RETURN_IF_ERROR(unknownFields(p, where, {"type", "pattern", "behavior", "invert"}));
    auto pattern = p.find("pattern");
    if (pattern == p.end() || !pattern->is_object() || pattern->size() != 1) {
      return invalidArgument(where + ": \"pattern\" must be {\"Regex\": ...} or {\"String\": ...}");
    }
    const std::string kind = pattern->begin().key();
    if (!pattern->begin().value().is_string()) return invalidArgument(where + ": pattern must be a string");
    const std::string text = pattern->begin().value().get<std::string>();
    if (kind == "Regex") {
      LG_ASSIGN_OR_RETURN(step.regex, PcreRegex::compileOniguruma(text));
      source = "regex:" + text;
    } else if (kind == "String") {
      LG_ASSIGN_OR_RETURN(step.regex, PcreRegex::compileLiteral(text));
      source = "string:" + text;
    } else {
      return invalidArgument(where + ": unknown pattern kind \"" + kind + "\"");
    }
    LG_ASSIGN_OR_RETURN(std::string behavior, stringField(p, where, "behavior"));
    if (behavior == "Removed") step.behavior = SplitBehavior::kRemoved;
    else if (behavior == "Isolated") step.behavior = SplitBehavior::kIsolated;
    else if (behavior == "MergedWithPrevious") step.behavior = SplitBehavior::kMergedWithPrevious;
    else if (behavior == "MergedWithNext") step.behavior = SplitBehavior::kMergedWithNext;
    else if (behavior == "Contiguous") step.behavior = SplitBehavior::kContiguous;
    else return invalidArgument(where + ": unknown behavior \"" + behavior + "\"");
    LG_ASSIGN_OR_RETURN(step.invert, boolField(p, where, "invert", std::nullopt));
  } else if (type == "Digits") {
    LG_RETURN_IF_ERROR(unknownFields(p, where, {"type", "individual_digits"}));
    step.kind = PreTokenizerStep::Kind::kDigits;
    LG_ASSIGN_OR_RETURN(step.individual_digits, boolField(p, where, "individual_digits", false));
  } else if (type == "ByteLevel") {
    LG_RETURN_IF_ERROR(unknownFields(p, where, {"type", "add_prefix_space", "trim_offsets", "use_regex"}));
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    LG_ASSIGN_OR_RETURN(step.add_prefix_space, boolField(p, where, "add_prefix_space", std::nullopt));
    LG_ASSIGN_OR_RETURN(bool trim_offsets, boolField(p, where, "trim_offsets", std::nullopt));
    (void)trim_offsets;  // offsets only
    LG_ASSIGN_OR_RETURN(bool use_regex, boolField(p, where, "use_regex", true));
    if (use_regex) {
      LG_ASSIGN_OR_RETURN(step.regex, PcreRegex::compileOniguruma(kGpt2Pattern));
    }
    source = std::string("bytelevel:") + (step.add_prefix_space ? "prefix" : "") + (use_regex ? ":regex" : "");
  } else {
    return unimplemented("pre_tokenizer \"" + type + "\" is not supported");
  }
  steps.push_back(std::move(step));
  sources.push_back(std::move(source));
  return Status::ok();
}

// --- model -------------------------------------------------------------------

struct Vocab {
  std::unordered_map<std::string, int32_t> by_token;  // as written in tokenizer.json
  std::vector<std::string> by_id;                     // holes are empty
  std::vector<bool> present;
};

Result<Vocab> parseVocab(const json& v) {
  if (!v.is_object()) return invalidArgument("model.vocab must be an object, not " + typeName(v));
  Vocab vocab;
  vocab.by_token.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) {
    const json& value = it.value();
    if (!value.is_number_integer()) {
      return invalidArgument("model.vocab[\"" + it.key() + "\"] must be an integer id, not " + typeName(value));
    }
    const int64_t id = value.get<int64_t>();
    if (id < 0 || id > kMaxTokenId) {
      return invalidArgument("model.vocab[\"" + it.key() + "\"] = " + std::to_string(id) + " is out of range");
    }
    const auto index = static_cast<size_t>(id);
    if (index >= vocab.by_id.size()) {
      vocab.by_id.resize(index + 1);
      vocab.present.resize(index + 1, false);
    }
    if (vocab.present[index]) {
      return invalidArgument("model.vocab: id " + std::to_string(id) + " is used by both \"" + vocab.by_id[index] +
                             "\" and \"" + it.key() + "\"");
    }
    vocab.present[index] = true;
    vocab.by_id[index] = it.key();
    vocab.by_token.emplace(it.key(), static_cast<int32_t>(id));
  }
  return vocab;
}

Status parseMerges(const json& m, const Vocab& vocab, MergeTable& table) {
  if (!m.is_array()) return invalidArgument("model.merges must be an array, not " + typeName(m));
  table.reserve(m.size());
  const bool legacy = !m.empty() && m[0].is_string();
  uint32_t rank = 0;
  for (size_t k = 0; k < m.size(); ++k) {
    const json& entry = m[k];
    std::string a, b;
    const std::string where = "model.merges[" + std::to_string(k) + "]";
    if (legacy) {
      if (!entry.is_string()) return invalidArgument(where + " must be a string like the first merge, not " + typeName(entry));
      const std::string& line = entry.get_ref<const std::string&>();
      if (line.rfind("#version", 0) == 0) continue;  // as the library's legacy reader
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return invalidArgument(where + " \"" + line + "\" is not two tokens separated by one space");
      }
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else {
      if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_string()) {
        return invalidArgument(where + " must be a pair of strings");
      }
      a = entry[0].get<std::string>();
      b = entry[1].get<std::string>();
    }
    auto ia = vocab.by_token.find(a);
    if (ia == vocab.by_token.end()) return invalidArgument(where + ": token \"" + a + "\" is not in the vocabulary");
    auto ib = vocab.by_token.find(b);
    if (ib == vocab.by_token.end()) return invalidArgument(where + ": token \"" + b + "\" is not in the vocabulary");
    auto merged = vocab.by_token.find(a + b);
    if (merged == vocab.by_token.end()) {
      return invalidArgument(where + ": merged token \"" + a + b + "\" is not in the vocabulary");
    }
    table.insert(ia->second, ib->second, rank++, merged->second);
  }
  return Status::ok();
}

struct ModelParts {
  Vocab vocab;
  MergeTable merges;
  bool ignore_merges = false;
  bool has_unk = false;
};

Result<ModelParts> parseModel(const json& m) {
  LG_RETURN_IF_ERROR(checkObject(m, "model"));
  LG_RETURN_IF_ERROR(unknownFields(m, "model", {"type", "dropout", "unk_token", "continuing_subword_prefix",
                                                "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges",
                                                "vocab", "merges"}));
  if (auto it = m.find("type"); it != m.end()) {
    if (!it->is_string()) return invalidArgument("model.type must be a string");
    if (it->get<std::string>() != "BPE") return unimplemented("model type \"" + it->get<std::string>() + "\" is not supported");
  }
  if (auto it = m.find("dropout"); it != m.end() && !it->is_null()) {
    if (!it->is_number()) return invalidArgument("model.dropout must be a number or null");
    const double p = it->get<double>();
    if (p < 0 || p > 1) return invalidArgument("model.dropout must be within [0, 1]");
    if (p != 0) return unimplemented("BPE dropout is not supported");
  }
  ModelParts parts;
  if (auto it = m.find("unk_token"); it != m.end() && !it->is_null()) {
    if (!it->is_string()) return invalidArgument("model.unk_token must be a string or null");
    parts.has_unk = true;
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto it = m.find(key); it != m.end() && !it->is_null()) {
      if (!it->is_string()) return invalidArgument(std::string("model.") + key + " must be a string or null");
      return unimplemented(std::string("BPE ") + key + " is not supported");
    }
  }
  LG_ASSIGN_OR_RETURN(bool fuse_unk, boolField(m, "model", "fuse_unk", false));
  (void)fuse_unk;  // matters only with an unknown token, see below
  LG_ASSIGN_OR_RETURN(bool byte_fallback, boolField(m, "model", "byte_fallback", false));
  if (byte_fallback) return unimplemented("BPE byte_fallback is not supported");
  LG_ASSIGN_OR_RETURN(parts.ignore_merges, boolField(m, "model", "ignore_merges", false));
  auto vocab = m.find("vocab");
  auto merges = m.find("merges");
  if (vocab == m.end() || merges == m.end()) return invalidArgument("model: missing \"vocab\" or \"merges\"");
  LG_ASSIGN_OR_RETURN(parts.vocab, parseVocab(*vocab));
  LG_RETURN_IF_ERROR(parseMerges(*merges, parts.vocab, parts.merges));
  return parts;
}

// --- added tokens --------------------------------------------------------------------

Result<std::vector<AddedToken>> parseAddedTokens(const json& a, const Vocab& vocab) {
  std::vector<AddedToken> tokens;
  if (a.is_null()) return tokens;
  if (!a.is_array()) return invalidArgument("added_tokens must be an array, not " + typeName(a));
  // The library assigns ids itself: a content already in the model vocabulary
  // keeps that id, others get the next id after the vocabulary's size. A file
  // whose ids disagree would be encoded differently by the library than it
  // says, so it is rejected.
  auto next_id = static_cast<int64_t>(vocab.by_token.size());
  std::unordered_map<std::string, int32_t> seen;
  for (size_t k = 0; k < a.size(); ++k) {
    const std::string where = "added_tokens[" + std::to_string(k) + "]";
    const json& t = a[k];
    LG_RETURN_IF_ERROR(checkObject(t, where));
    LG_RETURN_IF_ERROR(
        unknownFields(t, where, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"}));
    AddedToken token;
    auto id = t.find("id");
    if (id == t.end() || !id->is_number_integer()) return invalidArgument(where + ": \"id\" must be an integer");
    const int64_t file_id = id->get<int64_t>();
    if (file_id < 0 || file_id > kMaxTokenId) return invalidArgument(where + ": id " + std::to_string(file_id) + " is out of range");
    LG_ASSIGN_OR_RETURN(token.content, stringField(t, where, "content"));
    if (token.content.empty()) return invalidArgument(where + ": empty content");
    LG_ASSIGN_OR_RETURN(token.single_word, boolField(t, where, "single_word", std::nullopt));
    LG_ASSIGN_OR_RETURN(token.lstrip, boolField(t, where, "lstrip", std::nullopt));
    LG_ASSIGN_OR_RETURN(token.rstrip, boolField(t, where, "rstrip", std::nullopt));
    LG_ASSIGN_OR_RETURN(token.normalized, boolField(t, where, "normalized", std::nullopt));
    LG_ASSIGN_OR_RETURN(token.special, boolField(t, where, "special", std::nullopt));
    if (seen.count(token.content)) return invalidArgument(where + ": duplicate content \"" + token.content + "\"");
    int64_t expected;
    if (auto in_vocab = vocab.by_token.find(token.content); in_vocab != vocab.by_token.end()) {
      expected = in_vocab->second;
    } else {
      expected = next_id++;
    }
    if (expected != file_id) {
      return invalidArgument(where + " \"" + token.content + "\" has id " + std::to_string(file_id) +
                             " but the tokenizers library would assign " + std::to_string(expected));
    }
    token.id = static_cast<int32_t>(file_id);
    seen.emplace(token.content, token.id);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

bool isDeepSeekV3(const std::vector<PreTokenizerStep>& steps, const std::vector<std::string>& sources) {
  if (steps.size() != 4) return false;
  for (size_t k = 0; k < 3; ++k) {
    if (steps[k].kind != PreTokenizerStep::Kind::kSplit || steps[k].behavior != SplitBehavior::kIsolated ||
        steps[k].invert || sources[k] != "regex:" + std::string(kDeepSeekV3Patterns[k])) {
      return false;
    }
  }
  return sources[3] == "bytelevel:";
}

}  // namespace

Result<BpeTokenizer::Parts> parseTokenizerJson(const json& root) {
  LG_RETURN_IF_ERROR(checkObject(root, "tokenizer.json"));
  if (auto it = root.find("version"); it != root.end()) {
    if (!it->is_string() || it->get<std::string>() != "1.0") return unimplemented("tokenizer.json version other than \"1.0\"");
  }
  for (const char* key : {"truncation", "padding"}) {
    if (auto it = root.find(key); it != root.end() && !it->is_null()) {
      return unimplemented(std::string(key) + " is not supported (it must be null)");
    }
  }
  if (auto it = root.find("normalizer"); it != root.end()) LG_RETURN_IF_ERROR(checkNormalizer(*it, "normalizer"));
  if (auto it = root.find("post_processor"); it != root.end()) LG_RETURN_IF_ERROR(checkPostProcessor(*it));
  {
    auto it = root.find("decoder");
    LG_RETURN_IF_ERROR(checkDecoder(it == root.end() ? json() : *it));
  }
  auto model_it = root.find("model");
  if (model_it == root.end()) return invalidArgument("tokenizer.json has no \"model\"");
  LG_ASSIGN_OR_RETURN(ModelParts model, parseModel(*model_it));

  BpeTokenizer::Parts parts;
  std::vector<std::string> sources;
  {
    auto it = root.find("pre_tokenizer");
    if (it == root.end() || it->is_null()) return unimplemented("pre_tokenizer null (no ByteLevel) is not supported");
    LG_RETURN_IF_ERROR(parsePreTokenizer(*it, "pre_tokenizer", parts.steps, sources));
    size_t byte_level = 0;
    for (const PreTokenizerStep& s : parts.steps) byte_level += s.kind == PreTokenizerStep::Kind::kByteLevel;
    if (byte_level != 1 || parts.steps.back().kind != PreTokenizerStep::Kind::kByteLevel) {
      return unimplemented("pre_tokenizer must end with exactly one ByteLevel (byte-level BPE only)");
    }
    parts.deepseek_v3 = isDeepSeekV3(parts.steps, sources);
  }
  {
    auto it = root.find("added_tokens");
    LG_ASSIGN_OR_RETURN(parts.added, parseAddedTokens(it == root.end() ? json() : *it, model.vocab));
  }

  // Raw bytes per model token; the one-byte tokens.
  std::vector<std::string> token_bytes(model.vocab.by_id.size());
  int32_t byte_ids[256];
  std::fill(std::begin(byte_ids), std::end(byte_ids), -1);
  for (size_t id = 0; id < model.vocab.by_id.size(); ++id) {
    if (!model.vocab.present[id]) continue;
    if (auto bytes = byte_level::decode(model.vocab.by_id[id])) {
      if (bytes->size() == 1) byte_ids[static_cast<uint8_t>((*bytes)[0])] = static_cast<int32_t>(id);
      token_bytes[id] = std::move(*bytes);
    }
  }
  if (model.has_unk && std::count(std::begin(byte_ids), std::end(byte_ids), -1) > 0) {
    return unimplemented("unk_token with a vocabulary that lacks some byte-level symbols");
  }

  // What decode() yields per id: the ByteLevel decoder maps a token whose
  // characters are all in the byte alphabet to those bytes and keeps any other
  // token's UTF-8 as is; added tokens use their content.
  size_t size = model.vocab.by_id.size();
  for (const AddedToken& t : parts.added) size = std::max(size, static_cast<size_t>(t.id) + 1);
  std::vector<std::string> decoded(size);
  parts.kind.assign(size, BpeTokenizer::kAbsent);
  for (size_t id = 0; id < model.vocab.by_id.size(); ++id) {
    if (!model.vocab.present[id]) continue;
    parts.kind[id] = BpeTokenizer::kModel;
    decoded[id] = model.vocab.by_id[id];
  }
  for (const AddedToken& t : parts.added) {
    const auto id = static_cast<size_t>(t.id);
    parts.kind[id] = BpeTokenizer::kAdded | (t.special ? BpeTokenizer::kSpecial : 0);
    decoded[id] = t.content;
  }
  parts.decoded_start.reserve(size + 1);
  for (size_t id = 0; id < size; ++id) {
    parts.decoded_start.push_back(static_cast<uint32_t>(parts.decoded.size()));
    if (auto bytes = byte_level::decode(decoded[id])) {
      parts.decoded += *bytes;
    } else {
      parts.decoded += decoded[id];
    }
  }
  parts.decoded_start.push_back(static_cast<uint32_t>(parts.decoded.size()));
  parts.model = std::make_unique<BpeModel>(byte_ids, std::move(model.merges), std::move(token_bytes), model.ignore_merges);
  return parts;
}

}  // namespace lg::text
