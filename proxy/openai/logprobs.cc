#include "proxy/openai/logprobs.h"

#include <cmath>

#include "common/utf8.h"

namespace lg::proxy::openai {

using nlohmann::json;

double finiteLogprob(float logprob) {
  // JSON has no -Infinity; OpenAI reports -9999.0 for tokens it rules out.
  return std::isfinite(logprob) ? static_cast<double>(logprob) : -9999.0;
}

namespace {

json bytesArray(std::string_view bytes) {
  json out = json::array();
  for (char c : bytes) out.push_back(static_cast<int>(static_cast<uint8_t>(c)));
  return out;
}

std::string lossy(std::string_view bytes) {
  std::string out;
  utf8::appendLossy(out, bytes);
  return out;
}

int64_t characters(std::string_view bytes) {
  int64_t n = 0;
  for (char c : bytes) n += (static_cast<uint8_t>(c) & 0xc0) != 0x80;
  return n;
}

}  // namespace

json chatLogprob(const text::Tokenizer& tokenizer, const serving::SampledToken& token) {
  const std::string bytes = tokenizer.tokenBytes(token.token);
  json top = json::array();
  for (const serving::TokenLogprob& alt : token.top) {
    const std::string alt_bytes = tokenizer.tokenBytes(alt.token);
    top.push_back(json{{"token", lossy(alt_bytes)}, {"logprob", finiteLogprob(alt.logprob)}, {"bytes", bytesArray(alt_bytes)}});
  }
  return json{{"token", lossy(bytes)},
              {"logprob", finiteLogprob(token.logprob)},
              {"bytes", bytesArray(bytes)},
              {"top_logprobs", std::move(top)}};
}

json responsesEventLogprob(const text::Tokenizer& tokenizer, const serving::SampledToken& token) {
  json top = json::array();
  for (const serving::TokenLogprob& alt : token.top) {
    top.push_back(json{{"token", lossy(tokenizer.tokenBytes(alt.token))}, {"logprob", finiteLogprob(alt.logprob)}});
  }
  return json{{"token", lossy(tokenizer.tokenBytes(token.token))},
              {"logprob", finiteLogprob(token.logprob)},
              {"top_logprobs", std::move(top)}};
}

void TokenTextSpans::add(serving::SampledToken token) {
  const int32_t id = token.token;
  spans_.push_back(Span{std::move(token), decoded_, decoded_, false});
  ++open_;
  const size_t text = decoder_.push(id).size();
  if (text == 0) return;
  // The text completes the character every open token contributed to: they
  // all span it.
  decoded_ += text;
  for (size_t i = spans_.size() - open_; i < spans_.size(); ++i) spans_[i].end = decoded_;
  open_ = 0;
}

void TokenTextSpans::finish() {
  decoded_ += decoder_.flush().size();
  for (size_t i = spans_.size() - open_; i < spans_.size(); ++i) spans_[i].end = decoded_;
  open_ = 0;
}

std::vector<serving::SampledToken> TokenTextSpans::take(size_t begin, size_t end) {
  const size_t closed = spans_.size() - open_;
  size_t forget = 0;
  while (forget < closed && spans_[forget].end <= begin) ++forget;
  spans_.erase(spans_.begin(), spans_.begin() + static_cast<std::ptrdiff_t>(forget));
  std::vector<serving::SampledToken> out;
  for (size_t i = 0; i < spans_.size() - open_ && spans_[i].begin < end; ++i) {
    if (spans_[i].taken) continue;
    spans_[i].taken = true;
    out.push_back(std::move(spans_[i].token));  // never read again
  }
  return out;
}

std::string completionTokenText(const text::Tokenizer& tokenizer, int32_t id) {
  const std::string bytes = tokenizer.tokenBytes(id);
  if (utf8::isValid(bytes)) return bytes;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "bytes:";
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

void CompletionLogprobs::addToken(int32_t id, std::optional<float> logprob, std::span<const serving::TokenLogprob> top,
                                  bool has_top) {
  const std::string text = completionTokenText(tokenizer_, id);
  tokens_.push_back(text);
  token_logprobs_.push_back(logprob ? json(finiteLogprob(*logprob)) : json(nullptr));
  if (has_top) {
    json alternatives = json::object();
    for (const serving::TokenLogprob& alt : top) {
      alternatives[completionTokenText(tokenizer_, alt.token)] = finiteLogprob(alt.logprob);
    }
    // The sampled token is always listed (OpenAI: up to logprobs + 1 entries).
    alternatives[text] = finiteLogprob(*logprob);
    top_logprobs_.push_back(std::move(alternatives));
  } else {
    top_logprobs_.push_back(nullptr);
  }
  text_offset_.push_back(offset_);
  offset_ += characters(tokenizer_.tokenBytes(id));
}

void CompletionLogprobs::addPrompt(const serving::PromptLogprob& token) {
  addToken(token.token, token.logprob, token.top, token.logprob.has_value());
}

void CompletionLogprobs::addGenerated(const serving::SampledToken& token) {
  addToken(token.token, token.logprob, token.top, true);
}

void CompletionLogprobs::advance(std::string_view text) { offset_ += characters(text); }

json CompletionLogprobs::take() {
  json out = json{{"tokens", std::move(tokens_)},
                  {"token_logprobs", std::move(token_logprobs_)},
                  {"top_logprobs", std::move(top_logprobs_)},
                  {"text_offset", std::move(text_offset_)}};
  tokens_ = json::array();
  token_logprobs_ = json::array();
  top_logprobs_ = json::array();
  text_offset_ = json::array();
  return out;
}

}  // namespace lg::proxy::openai
