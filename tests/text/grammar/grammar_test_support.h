// Shared helpers of the grammar tests: the DeepSeek V3 vocabulary, a small
// synthetic vocabulary that crosses JSON boundaries, random generation by
// sampling allowed tokens, brute-force masks and an independent validator
// (valijson).
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>

#include "common/file_util.h"
#include "text/grammar/grammar.h"
#include "text/grammar/matcher.h"
#include "text/grammar/vocabulary.h"
#include "text/tokenizer/bpe_tokenizer.h"

namespace lg::text::grammar::testing {

inline std::shared_ptr<const Vocabulary> v3Vocabulary() {
  static const std::shared_ptr<const Vocabulary> kVocab = [] {
    auto text = readFile(std::string(LG_ASSETS_DIR) + "/deepseek-v3-tokenizer/tokenizer.json");
    if (!text.isOk()) throw std::runtime_error(text.status().toString());
    auto t = BpeTokenizer::fromJson(nlohmann::json::parse(*text));
    if (!t.isOk()) throw std::runtime_error(t.status().toString());
    return Vocabulary::fromTokenizer(*t.value());
  }();
  return kVocab;
}

// Every single byte, plus pieces that cross JSON token boundaries.
inline std::shared_ptr<const Vocabulary> smallVocabulary() {
  static const std::shared_ptr<const Vocabulary> kVocab = [] {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
    for (const char* s : {"\"}", "\",", "\":", "\"]", "},", "}]", "],", "]}", "{\"", "[\"", ",\"", "\":\"", "\\\"",
                          "\\u00", "\\u", "\\n\"", "true", "false", "null", "nul", "tr", "12", "0.", "-1", "e+",
                          "\"a", "a\"", "ab", "abc\"}", "\xC3\xA9", "\xC3", "\xA9\"", "\xE4\xB8", "\xAD", "\"\"",
                          "{}", "[]", "[{", "}}", "]]", "\"command", "command\":[", "\":[\"", "\"]}", "ls", " -la",
                          "workdir", "timeout_ms", "\":1", "00", "99", "  ", "\n", " \"", ", \"", "\": "}) {
      t.emplace_back(s);
    }
    t.emplace_back("");  // an unmatchable id
    return Vocabulary::fromBytes(std::move(t));
  }();
  return kVocab;
}

inline std::shared_ptr<const Grammar> mustBuild(GrammarOrError g) {
  if (auto* err = std::get_if<GrammarError>(&g)) {
    ADD_FAILURE() << err->toString();
    return nullptr;
  }
  return std::get<std::shared_ptr<const Grammar>>(g);
}

inline std::vector<int32_t> allowedIds(const std::vector<uint32_t>& mask, int32_t n) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < n; ++i) {
    if (mask[static_cast<size_t>(i) / 32] >> (i % 32) & 1) out.push_back(i);
  }
  return out;
}

// The mask by brute force: every token through accept + rollback.
inline std::vector<uint32_t> bruteMask(Matcher& m) {
  const Vocabulary& v = m.vocabulary();
  std::vector<uint32_t> mask(v.maskWords(), 0);
  for (int32_t i = 0; i < v.size(); ++i) {
    if (m.accept(i)) {
      mask[static_cast<size_t>(i) / 32] |= 1u << (i % 32);
      m.rollback(1);
    }
  }
  return mask;
}

// Random generation: a uniformly random allowed token per step; stops when
// the grammar can end (with probability stop_p) or must end. Returns false if
// it got stuck (no allowed token and cannot end: a bug).
inline bool generate(Matcher& m, std::mt19937& rng, std::string* text, int max_tokens = 400, double stop_p = 0.3,
                     const std::function<void(Matcher&)>& at_step = nullptr) {
  const Vocabulary& v = m.vocabulary();
  std::vector<uint32_t> mask(v.maskWords());
  text->clear();
  for (int step = 0; step < max_tokens; ++step) {
    if (m.mustEnd()) return m.canEnd();
    if (m.canEnd() && std::uniform_real_distribution<double>(0, 1)(rng) < stop_p) return true;
    if (at_step) at_step(m);
    m.fillNextTokenMask(mask);
    std::vector<int32_t> ids = allowedIds(mask, v.size());
    if (ids.empty()) return m.canEnd();
    // Late in long outputs prefer tokens that close something, so that
    // generation ends.
    if (step > 24) {
      std::vector<int32_t> closing;
      for (int32_t id : ids) {
        if (v.bytes(id).find_first_of("\"]}") != std::string_view::npos) closing.push_back(id);
      }
      if (!closing.empty()) ids.swap(closing);
    }
    const int32_t id = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
    if (!m.accept(id)) return false;
    text->append(v.bytes(id));
  }
  return true;  // length cut: the text is a prefix, callers check canEnd
}

// valijson validation of a JSON text against a schema.
inline bool validates(const nlohmann::json& schema, const std::string& text, std::string* why = nullptr) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    if (why) *why = std::string("not JSON: ") + e.what();
    return false;
  }
  valijson::Schema s;
  valijson::SchemaParser parser;
  valijson::adapters::NlohmannJsonAdapter schema_adapter(schema);
  parser.populateSchema(schema_adapter, s);
  valijson::Validator validator;
  valijson::adapters::NlohmannJsonAdapter doc_adapter(doc);
  valijson::ValidationResults results;
  const bool ok = validator.validate(s, doc_adapter, &results);
  if (!ok && why) {
    valijson::ValidationResults::Error e;
    while (results.popError(e)) *why += e.description + "; ";
  }
  return ok;
}

}  // namespace lg::text::grammar::testing
