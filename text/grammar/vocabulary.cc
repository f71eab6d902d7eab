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
  lcp_.assign(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const std::string_view a = bytes(sorted_[i - 1]), b = bytes(sorted_[i]);
    size_t l = 0;
    const size_t m = std::min<size_t>({a.size(), b.size(), 65535});
    while (l < m && a[l] == b[l]) ++l;
    lcp_[i] = static_cast<uint16_t>(l);
  }
  first_byte_.assign(257, 0);
  for (int b = 0, i = 0; b <= 256; ++b) {
    while (static_cast<size_t>(i) < sorted_.size() && static_cast<uint8_t>(bytes(sorted_[static_cast<size_t>(i)])[0]) < b) ++i;
    first_byte_[static_cast<size_t>(b)] = static_cast<uint32_t>(i);
  }
}

size_t Vocabulary::subtreeEnd(size_t i, size_t len) const {
  const std::string_view prefix = bytes(sorted_[i]).substr(0, len);
  auto under = [&](size_t j) { return bytes(sorted_[j]).starts_with(prefix); };
  // Galloping, then binary search: cost in the log of the subtree's size.
  size_t lo = i + 1, step = 1;  // [i, lo) are under the prefix
  size_t hi = lo;
  while (hi < sorted_.size() && under(hi)) {
    lo = hi + 1;
    hi = lo + step;
    step *= 2;
  }
  hi = std::min(hi, sorted_.size());
  while (lo < hi) {  // first j in [lo, hi) not under the prefix
    const size_t mid = lo + (hi - lo) / 2;
    if (under(mid)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
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
