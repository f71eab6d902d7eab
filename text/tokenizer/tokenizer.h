// Tokenizer: Hugging Face tokenizer.json of the byte-level BPE family
// (DeepSeek V2/V3, GPT-2 style), encoding exactly like the `tokenizers` library.
//
// Thread-safety: a loaded Tokenizer is immutable; all const methods may be called
// concurrently from any thread.
// Input text must be valid UTF-8 (embedded NULs are fine); invalid UTF-8 is an
// InvalidArgument error naming the byte offset. Nothing is silently replaced.
// The implementation (bpe_tokenizer.h) and its design: docs/tokenizer.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "text/prompt_text.h"

namespace lg::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads DIR/tokenizer.json. Unsupported tokenizer.json features (a normalizer,
  // pre-tokenizer, model type or option this class does not implement) are
  // Unimplemented errors naming the feature, never a silent divergence.
  static Result<std::unique_ptr<Tokenizer>> loadFromDir(const std::string& dir);
  static Result<std::unique_ptr<Tokenizer>> loadFromJson(std::string_view tokenizer_json);

  // Plain text (a completion prompt, a message's content): added-token strings
  // are encoded as ordinary text. No BOS/EOS is added.
  virtual Result<std::vector<int32_t>> encode(std::string_view text) const = 0;

  // A rendered prompt: added tokens are recognized only inside prompt.trusted
  // (leftmost-longest, with the library's lstrip/rstrip/single_word rules, each
  // trusted range being one "sentence"). The text between two recognized
  // tokens is encoded as one piece, whatever mix of trusted and client bytes it
  // holds. With the whole text trusted this is exactly the library's encode.
  // Ranges must be sorted, disjoint, non-empty, inside the text and on
  // character boundaries (else InvalidArgument).
  virtual Result<std::vector<int32_t>> encodePrompt(const PromptText& prompt) const = 0;

  // Text for ids. Special tokens are included unless skip_special. Bytes that do
  // not form valid UTF-8 become U+FFFD (as in `tokenizers`' decode). An id
  // outside the vocabulary is an InvalidArgument error naming its position.
  virtual Result<std::string> decode(std::span<const int32_t> ids, bool skip_special = false) const = 0;

  // The bytes decode() contributes for one token before UTF-8 repair (added
  // tokens: their content). Empty if the id is not in the vocabulary.
  virtual std::string tokenBytes(int32_t id) const = 0;

  // The id of an added token by its content ("<｜end▁of▁sentence｜>").
  virtual std::optional<int32_t> addedTokenId(std::string_view content) const = 0;
  virtual bool isSpecial(int32_t id) const = 0;

  // One more than the largest id (model vocabulary plus added tokens).
  virtual int32_t vocabSize() const = 0;
};

// Streaming decode: feed ids one at a time, get back the text that is complete
// so far (a multi-byte UTF-8 character split across tokens is held back until
// its last byte arrives). The concatenated output plus flush() equals decode()
// of all ids. An id outside the vocabulary yields nothing. Not thread-safe.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}
  // Returns newly completed text (possibly empty).
  std::string push(int32_t id);
  // Remaining held-back bytes at end of stream, as U+FFFD replacements.
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace lg::text
