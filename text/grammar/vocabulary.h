// Vocabulary: the raw bytes of every token a grammar may match, for one
// tokenizer, sorted by bytes so that a walk over tokens shares the work of
// common prefixes (a token trie in array form: consecutive tokens in byte
// order share their longest common prefix).
//
// Special tokens (BOS, EOS, ...) and absent ids are never matchable: the
// caller handles EOS through Matcher::canEnd(). Added tokens that are not
// special (DeepSeek's tool-call markers) match their content bytes.
// Immutable after construction; share it (shared_ptr<const Vocabulary>).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lg::text {
class Tokenizer;
}

namespace lg::text::grammar {

class Vocabulary {
 public:
  static std::shared_ptr<const Vocabulary> fromTokenizer(const Tokenizer& tokenizer);
  // Tests: token i has bytes tokens[i]; an empty string is not matchable.
  static std::shared_ptr<const Vocabulary> fromBytes(std::vector<std::string> tokens);

  int32_t size() const { return static_cast<int32_t>(start_.size()) - 1; }
  // Words of a bitmask over the vocabulary.
  size_t maskWords() const { return (static_cast<size_t>(size()) + 31) / 32; }
  std::string_view bytes(int32_t id) const {
    return std::string_view(data_).substr(start_[static_cast<size_t>(id)],
                                          start_[static_cast<size_t>(id) + 1] - start_[static_cast<size_t>(id)]);
  }
  bool matchable(int32_t id) const { return id >= 0 && id < size() && !bytes(id).empty(); }
  // Matchable ids in byte order.
  std::span<const int32_t> sorted() const { return sorted_; }
  // lcp()[i]: the length of the common prefix of sorted()[i - 1] and
  // sorted()[i] (0 for i = 0), capped at 65535.
  std::span<const uint16_t> lcp() const { return lcp_; }
  // The first sorted position after `i` whose token does not start with the
  // first `len` bytes of sorted()[i] (len <= its size): skips a trie subtree.
  size_t subtreeEnd(size_t i, size_t len) const;
  // Sorted positions of the tokens whose first byte is b:
  // [firstByteBegin(b), firstByteBegin(b + 1)), b in [0, 256].
  size_t firstByteBegin(int b) const { return first_byte_[static_cast<size_t>(b)]; }
  size_t maxTokenBytes() const { return max_len_; }

  explicit Vocabulary(std::vector<std::string> tokens);

 private:
  std::string data_;
  std::vector<uint32_t> start_;
  std::vector<int32_t> sorted_;
  std::vector<uint16_t> lcp_;
  std::vector<uint32_t> first_byte_;  // 257 entries
  size_t max_len_ = 0;
};

}  // namespace lg::text::grammar
