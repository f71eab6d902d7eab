// Added tokens (tokenizer.json "added_tokens") and how `tokenizers` finds them
// in text: two leftmost-longest scans (first the tokens with normalized=false,
// then, in the gaps, those with normalized=true), with the single_word, lstrip
// and rstrip rules applied to each match.
//
// LatentGate scans only the trusted ranges of a PromptText: each trusted range
// is one "sentence" for the library's rules, so a client's bytes can neither
// form an added token nor change which tokens the server's own text yields.
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/prompt_text.h"

namespace lg::text {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// An extracted added token: its id and the byte span it stands for (the
// content plus any whitespace that lstrip/rstrip absorbed). Consecutive
// matches can overlap when rstrip swallowed the start of the next token; the
// library then keeps both, and so does encodePrompt.
struct AddedTokenMatch {
  size_t start = 0;
  size_t stop = 0;
  int32_t id = 0;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  explicit AddedVocabulary(std::vector<AddedToken> tokens);

  // Appends the matches inside the trusted ranges of `text`, in order.
  void find(std::string_view text, std::span<const ByteRange> trusted, std::vector<AddedTokenMatch>& out) const;

  const AddedToken* byContent(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  class Trie {
   public:
    void add(std::string_view content, int32_t token_index);
    // Longest token starting at text[i], within text[i, end): its index or -1.
    int32_t longest(std::string_view text, size_t i, size_t end, size_t* length) const;
    bool empty() const { return nodes_.size() <= 1; }

   private:
    struct Node {
      int32_t token = -1;
      std::vector<std::pair<uint8_t, uint32_t>> children;
    };
    std::vector<Node> nodes_{Node{}};
  };

  // One find_matches call of the library on the sentence text[begin, end).
  void scan(std::string_view text, size_t begin, size_t end, const Trie& trie,
            std::vector<AddedTokenMatch>& out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, size_t> by_content_;
  Trie raw_;         // normalized == false
  Trie normalized_;  // normalized == true (the normalizer is a no-op, see tokenizer_json.cc)
};

}  // namespace lg::text
