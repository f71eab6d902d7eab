// Shared fixtures of the tokenizer tests: the DeepSeek V3 tokenizer.json
// (parsed once per test binary) and tokenizers built from it.
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "text/tokenizer/bpe_tokenizer.h"

namespace lg::text::testing {

inline std::string fixturePath(const std::string& name) { return std::string(LG_FIXTURES_DIR) + "/" + name; }
inline std::string assetPath(const std::string& name) { return std::string(LG_ASSETS_DIR) + "/" + name; }

inline nlohmann::json readJsonFile(const std::string& path) {
  auto text = readFile(path);
  if (!text.isOk()) throw std::runtime_error(text.status().toString());
  return nlohmann::json::parse(*text);
}

inline nlohmann::json readJsonFixture(const std::string& name) { return readJsonFile(fixturePath(name)); }

inline const nlohmann::json& v3Json() {
  static const nlohmann::json kJson = readJsonFile(assetPath("deepseek-v3-tokenizer/tokenizer.json"));
  return kJson;
}

inline std::unique_ptr<BpeTokenizer> build(const nlohmann::json& j, bool fast = true) {
  TokenizerOptions options;
  options.allow_fast_path = fast;
  auto t = BpeTokenizer::fromJson(j, options);
  if (!t.isOk()) throw std::runtime_error(t.status().toString());
  return std::move(t).value();
}

// DeepSeek V3 with the hand-written pre-tokenizer, and with the PCRE2 one.
inline const BpeTokenizer& v3() {
  static const std::unique_ptr<BpeTokenizer> kTokenizer = build(v3Json(), true);
  return *kTokenizer;
}
inline const BpeTokenizer& v3General() {
  static const std::unique_ptr<BpeTokenizer> kTokenizer = build(v3Json(), false);
  return *kTokenizer;
}

inline PromptText allTrusted(const std::string& text) {
  PromptText p;
  p.append(text, true);
  return p;
}

}  // namespace lg::text::testing
