// libFuzzer target for the tokenizer (DeepSeek V3 tokenizer.json from the
// fixtures). The input is split into a text and a list of trusted ranges:
//   byte 0: number of ranges (mod 8); then 4 bytes per range (two uint16
//   offsets, taken modulo the text length); the rest is the text.
// Checks: encode/encodePrompt never crash and fail only on invalid UTF-8 or bad
// ranges; for valid UTF-8, decode(encode(x)) == x, encodePrompt with no
// trusted range equals encode, the fast and the general pre-tokenizers agree,
// decode of any in-range ids never fails and streaming equals decode.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "text/tokenizer/bpe_tokenizer.h"
#include "common/utf8.h"

namespace {

using lg::text::BpeTokenizer;

struct Tokenizers {
  std::unique_ptr<BpeTokenizer> fast;
  std::unique_ptr<BpeTokenizer> general;
};

const Tokenizers& tokenizers() {
  static const Tokenizers kTokenizers = [] {
    auto text = lg::readFile(std::string(LG_ASSETS_DIR) + "/deepseek-v3-tokenizer/tokenizer.json");
    if (!text.isOk()) std::abort();
    const nlohmann::json root = nlohmann::json::parse(*text);
    lg::text::TokenizerOptions general;
    general.allow_fast_path = false;
    auto fast = BpeTokenizer::fromJson(root);
    auto slow = BpeTokenizer::fromJson(root, general);
    if (!fast.isOk() || !slow.isOk()) std::abort();
    return Tokenizers{std::move(fast).value(), std::move(slow).value()};
  }();
  return kTokenizers;
}

void check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizers& t = tokenizers();
  if (size == 0) return 0;
  const size_t ranges = data[0] % 8;
  size_t header = 1 + 4 * ranges;
  if (header > size) header = size;
  const std::string text(reinterpret_cast<const char*>(data) + header, size - header);
  const bool valid = !lg::utf8::firstInvalid(text).has_value();

  auto ids = t.fast->encode(text);
  check(ids.isOk() == valid);
  if (valid) {
    auto back = t.fast->decode(*ids);
    check(back.isOk() && *back == text);
    auto general = t.general->encode(text);
    check(general.isOk() && *general == *ids);
    lg::text::PromptText untrusted;
    untrusted.append(text, false);
    auto prompt = t.fast->encodePrompt(untrusted);
    check(prompt.isOk() && *prompt == *ids);
    lg::text::StreamDecoder stream(*t.fast);
    std::string streamed;
    for (int32_t id : *ids) streamed += stream.push(id);
    streamed += stream.flush();
    check(streamed == text);
  }

  // Fuzzer-chosen trusted ranges (possibly unsorted or splitting characters:
  // those must be rejected cleanly, never crash).
  lg::text::PromptText prompt;
  prompt.text = text;
  for (size_t k = 0; k < ranges && 1 + 4 * k + 3 < header; ++k) {
    const uint8_t* r = data + 1 + 4 * k;
    const size_t n = text.size() + 1;
    size_t a = (static_cast<size_t>(r[0]) | static_cast<size_t>(r[1]) << 8) % n;
    size_t b = (static_cast<size_t>(r[2]) | static_cast<size_t>(r[3]) << 8) % n;
    if (a > b) std::swap(a, b);
    prompt.trusted.push_back({a, b});
  }
  auto with_tokens = t.fast->encodePrompt(prompt);
  if (with_tokens.isOk()) {
    check(valid);
    auto general = t.general->encodePrompt(prompt);
    check(general.isOk() && *general == *with_tokens);
    // Decoding gives the text back: added tokens decode to their content.
    auto back = t.fast->decode(*with_tokens);
    check(back.isOk() && *back == text);
  }

  // Arbitrary ids from the input: decode never fails for in-range ids.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 3 < size && raw.size() < 64; i += 3) {
    raw.push_back(static_cast<int32_t>((data[i] | data[i + 1] << 8 | data[i + 2] << 16) % t.fast->vocabSize()));
  }
  auto decoded = t.fast->decode(raw, data[size - 1] & 1);
  check(decoded.isOk());
  lg::text::StreamDecoder stream(*t.fast, data[size - 1] & 1);
  std::string streamed;
  for (int32_t id : raw) streamed += stream.push(id);
  streamed += stream.flush();
  check(streamed == *decoded);
  return 0;
}
