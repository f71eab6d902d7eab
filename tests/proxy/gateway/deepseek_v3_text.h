// The DeepSeek-V3 tokenizer and chat template shipped in assets/ (and a
// prompt encoder over them), loaded once per test binary, for the gateway's
// unit tests that render and tokenize real chat prompts. A load failure
// throws, which fails the test that asked.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "proxy/openai/prompt_encoder.h"
#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::proxy::v3 {

inline std::string assetDir() { return std::string(LG_ASSETS_DIR) + "/deepseek-v3-tokenizer"; }

inline const text::Tokenizer& tokenizer() {
  static const std::unique_ptr<text::Tokenizer> t = [] {
    auto r = text::Tokenizer::loadFromDir(assetDir());
    if (!r.isOk()) throw std::runtime_error(r.status().toString());
    return std::move(r).value();
  }();
  return *t;
}

inline const text::ChatTemplate& chatTemplate() {
  static const text::ChatTemplate t = [] {
    auto r = text::ChatTemplate::loadFromDir(assetDir());
    if (!r.isOk()) throw std::runtime_error(r.status().toString());
    return std::move(r).value();
  }();
  return t;
}

inline const openai::PromptEncoder& encoder() {
  static const openai::PromptEncoder e(chatTemplate(), tokenizer());
  return e;
}

}  // namespace lg::proxy::v3
