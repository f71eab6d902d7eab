#include "text/grammar/vocabulary.h"

#include <algorithm>

#include "text/tokenizer/tokenizer.h"

namespace lg::text::grammar {

Vocabulary::Vocabulary(std::vector<std::string> tokens) {
  start_.reserve(tokens.size() + 1);
  for (const std::string& t : tokens) {
    start_.push_back(static_cast<uint32_t>(data_.size()));
    data_ += t;
    max_len_ = std::max(max_len_, t.size());
  }
  start_.push_back(static_cast<uint32_t>(data_.size()));
  for (int32_t i = 0; i < static_cast<int32_t>(tokens.size()); ++i) {
    if (!tokens[static_cast<size_t>(i)].empty()) sorted_.push_back(i);
  }
  std::stable_sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) { return bytes(a) < bytes(b); });
}

std::shared_ptr<const Vocabulary> Vocabulary::fromBytes(std::vector<std::string> tokens) {
  return std::make_shared<const Vocabulary>(std::move(tokens));
}

std::shared_ptr<const Vocabulary> Vocabulary::fromTokenizer(const Tokenizer& tokenizer) {
  std::vector<std::string> tokens(static_cast<size_t>(tokenizer.vocabSize()));
  for (int32_t i = 0; i < tokenizer.vocabSize(); ++i) {
    if (!tokenizer.isSpecial(i)) tokens[static_cast<size_t>(i)] = tokenizer.tokenBytes(i);
  }
  return fromBytes(std::move(tokens));
}

}  // namespace lg::text::grammar
