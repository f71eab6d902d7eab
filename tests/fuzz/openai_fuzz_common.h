// Shared by the three OpenAI endpoint fuzz targets (openai_*_fuzz.cc): the
// real DeepSeek-V3 tokenizer and chat template, loaded once, and the checks
// every target runs on what the schema layer produces.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "proxy/openai/chat_response.h"
#include "proxy/openai/prompt_encoder.h"
#include "proxy/openai/responses_response.h"
#include "proxy/openai/sse.h"
#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::proxy::openai::fuzz {

struct Model {
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::unique_ptr<text::ChatTemplate> chat_template;
  std::unique_ptr<PromptEncoder> encoder;
};

inline const Model& model() {
  static const Model m = [] {
    const std::string dir = std::string(LG_ASSETS_DIR) + "/deepseek-v3-tokenizer";
    Model out;
    auto tokenizer = text::Tokenizer::loadFromDir(dir);
    auto tmpl = text::ChatTemplate::loadFromDir(dir);
    if (!tokenizer.isOk() || !tmpl.isOk()) std::abort();
    out.tokenizer = std::move(*tokenizer);
    out.chat_template = std::make_unique<text::ChatTemplate>(std::move(*tmpl));
    out.encoder = std::make_unique<PromptEncoder>(*out.chat_template, *out.tokenizer);
    return out;
  }();
  return m;
}

// An error must name a status and carry a message; it must serialize.
inline void checkError(const ApiError& e) {
  if (e.http_status < 400 || e.http_status > 599 || e.message.empty() || e.type.empty()) std::abort();
  (void)apiErrorBody(e);
}

// Every SSE body a responder writes must parse back as JSON, event by event;
// returns the events' data.
inline std::vector<nlohmann::json> checkSse(std::string_view bytes) {
  std::vector<nlohmann::json> events;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t end = bytes.find("\n\n", pos);
    if (end == std::string_view::npos) std::abort();
    std::string_view block = bytes.substr(pos, end - pos);
    pos = end + 2;
    if (block.starts_with("event: ")) block = block.substr(block.find('\n') + 1);
    if (!block.starts_with("data: ")) std::abort();
    const std::string_view payload = block.substr(6);
    if (payload == "[DONE]") continue;
    nlohmann::json event = nlohmann::json::parse(payload, nullptr, false);
    if (event.is_discarded()) std::abort();
    events.push_back(std::move(event));
  }
  return events;
}

// The input's bytes as model output, through a streaming responder, split
// where the input says: the output parser on hostile text.
inline serving::StreamEvent textEvent(std::string_view text, bool final) {
  serving::StreamEvent e;
  e.text = std::string(text);
  e.token_ids.assign(1, 0);
  e.final = final;
  e.usage.prompt_tokens = 3;
  e.usage.miss_tokens = 3;
  e.usage.completion_tokens = 1;
  return e;
}

}  // namespace lg::proxy::openai::fuzz
