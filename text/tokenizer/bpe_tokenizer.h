// BpeTokenizer: the Tokenizer implementation (tokenizer.h) for byte-level BPE
// tokenizer.json files. Internal header: the CLI and the server use
// Tokenizer::loadFromDir; tests use this one for options and pre-token access.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "text/tokenizer/added_vocabulary.h"
#include "text/tokenizer/bpe_model.h"
#include "text/tokenizer/pre_tokenizer.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::text {

struct TokenizerOptions {
  // Use the hand-written DeepSeek V3 pre-tokenizer when the file's
  // pre_tokenizer is exactly V3's. Off: always the general PCRE2 pipeline
  // (tests compare the two).
  bool allow_fast_path = true;

  // Per-request bounds of the general (PCRE2) pre-tokenizer path; the
  // DeepSeek V3 fast path runs no regex and needs none. One request is one
  // encode() or encodePrompt() call; going over is a ResourceExhausted error
  // naming the bound. See RegexBudget (pcre_regex.h), docs/tokenizer.md.
  //
  // PCRE2 match-limit units over all the request's regex calls: base + per
  // byte of input. Ordinary text uses 16 to 40 per byte (16 per call, a call
  // every 1 to 3 bytes); each call also stays under PCRE2's per-call limit.
  uint64_t regex_units_base = uint64_t{1} << 24;  // 16.8M
  uint64_t regex_units_per_byte = 64;
  // Thread CPU time of the request's general-path encoding (regex calls and
  // the BPE of their pieces, which are interleaved): base + per MB of input,
  // checked every 64 regex calls; a backstop for scans PCRE2 does not count.
  // 0 and 0: no CPU check.
  int64_t general_path_cpu_ms_base = 1000;
  int64_t general_path_cpu_ms_per_mb = 1000;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Never throws; all problems with the document are Status errors.
  static Result<std::unique_ptr<BpeTokenizer>> fromJson(const nlohmann::json& root,
                                                        const TokenizerOptions& options = {});

  Result<std::vector<int32_t>> encode(std::string_view text) const override;
  // encode(), also reporting what its regex calls cost (general path).
  struct RegexStats {
    uint64_t units = 0;  // charged to the request's regex budget
    uint64_t calls = 0;
  };
  Result<std::vector<int32_t>> encode(std::string_view text, RegexStats* stats) const;
  Result<std::vector<int32_t>> encodePrompt(const PromptText& prompt) const override;
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special = false) const override;
  std::string tokenBytes(int32_t id) const override;
  std::optional<int32_t> addedTokenId(std::string_view content) const override;
  bool isSpecial(int32_t id) const override;
  int32_t vocabSize() const override { return vocab_size_; }

  // The pre-tokens of plain `text` (valid UTF-8), as raw bytes.
  Result<std::vector<std::string>> preTokenize(std::string_view text) const;
  bool usesFastPath() const { return fast_path_; }
  const BpeModel& model() const { return *model_; }

  // Parts assembled by fromJson (tokenizer_json.cc).
  struct Parts {
    std::unique_ptr<BpeModel> model;
    std::vector<PreTokenizerStep> steps;
    bool deepseek_v3 = false;
    std::vector<AddedToken> added;
    std::string decoded;                 // decode() bytes of every id, concatenated
    std::vector<uint32_t> decoded_start;  // per id, plus one end offset
    std::vector<uint8_t> kind;            // per id: kAbsent, kModel, kAdded | kSpecial
  };
  static constexpr uint8_t kAbsent = 0, kModel = 1, kAdded = 2, kSpecial = 4;

 private:
  BpeTokenizer(Parts parts, const TokenizerOptions& options);

  bool valid(int32_t id) const {
    return id >= 0 && id < vocab_size_ && kind_[static_cast<size_t>(id)] != kAbsent;
  }
  std::string_view decodedBytes(int32_t id) const {
    const auto i = static_cast<size_t>(id);
    return std::string_view(decoded_).substr(decoded_start_[i], decoded_start_[i + 1] - decoded_start_[i]);
  }

  // The regex budget of a request over `bytes` of input.
  RegexBudget requestBudget(size_t bytes) const;
  // Pre-tokenizes one stretch of plain text and appends the BPE ids; regex
  // calls are charged to `budget` (the request's).
  Status encodeText(std::string_view text, std::vector<int32_t>& out, RegexBudget& budget) const;
  template <typename Sink>
  Status forEachPiece(std::string_view text, Sink& sink, RegexBudget& budget) const;

  // Regex scratch (a JIT stack is an mmap) is pooled across calls.
  std::unique_ptr<PreTokenizeScratch> acquireScratch() const;
  void releaseScratch(std::unique_ptr<PreTokenizeScratch> scratch) const;

  std::unique_ptr<BpeModel> model_;
  PreTokenizerPipeline pipeline_;
  mutable std::mutex scratch_mutex_;
  mutable std::vector<std::unique_ptr<PreTokenizeScratch>> scratch_pool_;
  bool fast_path_;
  uint64_t regex_units_base_;
  uint64_t regex_units_per_byte_;
  int64_t cpu_ms_base_;
  int64_t cpu_ms_per_mb_;
  AddedVocabulary added_;
  std::string decoded_;
  std::vector<uint32_t> decoded_start_;
  std::vector<uint8_t> kind_;
  int32_t vocab_size_;
};

// tokenizer_json.cc: validates a tokenizer.json document and builds the parts.
Result<BpeTokenizer::Parts> parseTokenizerJson(const nlohmann::json& root);

}  // namespace lg::text
