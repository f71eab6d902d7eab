#include "text/tokenizer/added_vocabulary.h"

#include <algorithm>

#include "text/tokenizer/unicode_data.h"
#include "common/utf8.h"

namespace lg::text {

void AddedVocabulary::Trie::add(std::string_view content, int32_t token_index) {
  uint32_t node = 0;
  for (char c : content) {
    const auto byte = static_cast<uint8_t>(c);
    uint32_t next = 0;
    for (const auto& [b, child] : nodes_[node].children) {
      if (b == byte) next = child;
    }
    if (next == 0) {
      next = static_cast<uint32_t>(nodes_.size());
      nodes_[node].children.emplace_back(byte, next);
      nodes_.emplace_back();
    }
    node = next;
  }
  nodes_[node].token = token_index;
}

int32_t AddedVocabulary::Trie::longest(std::string_view text, size_t i, size_t end, size_t* length) const {
  int32_t best = -1;
  uint32_t node = 0;
  for (size_t j = i; j < end; ++j) {
    const auto byte = static_cast<uint8_t>(text[j]);
    uint32_t next = 0;
    for (const auto& [b, child] : nodes_[node].children) {
      if (b == byte) {
        next = child;
        break;
      }
    }
    if (next == 0) break;
    node = next;
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      *length = j + 1 - i;
    }
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (size_t k = 0; k < tokens_.size(); ++k) {
    by_content_.emplace(tokens_[k].content, k);
    (tokens_[k].normalized ? normalized_ : raw_).add(tokens_[k].content, static_cast<int32_t>(k));
  }
}

const AddedToken* AddedVocabulary::byContent(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::scan(std::string_view text, size_t begin, size_t end, const Trie& trie,
                           std::vector<AddedTokenMatch>& out) const {
  if (trie.empty()) return;
  const unicode::Table& t = unicode::table();
  size_t start_offset = begin;
  for (size_t i = begin; i < end;) {
    size_t length = 0;
    const int32_t index = trie.longest(text, i, end, &length);
    if (index < 0) {
      ++i;
      continue;
    }
    const AddedToken& token = tokens_[static_cast<size_t>(index)];
    size_t start = i;
    size_t stop = i + length;
    i = stop;  // the automaton resumes after the raw match, kept or not
    if (token.single_word) {
      // Rust regex \w before and after, within this sentence.
      size_t len = 0;
      const bool word_before =
          start > begin && unicode::isRustRegexWord(utf8::decode(text.data() + utf8::previousStart(text, start), &len));
      const bool word_after = stop < end && unicode::isRustRegexWord(utf8::decode(text.data() + stop, &len));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      // Start of the whitespace run that ends at `start`, not before the end of
      // the previous match.
      size_t s = start;
      while (s > begin) {
        const size_t prev = utf8::previousStart(text, s);
        size_t len = 0;
        if (!t.isWhiteSpace(utf8::decode(text.data() + prev, &len))) break;
        s = prev;
      }
      start = std::max(s, start_offset);
    }
    if (token.rstrip) {
      while (stop < end) {
        size_t len = 0;
        if (!t.isWhiteSpace(utf8::decode(text.data() + stop, &len))) break;
        stop += len;
      }
    }
    out.push_back({start, stop, token.id});
    start_offset = stop;
  }
}

void AddedVocabulary::find(std::string_view text, std::span<const ByteRange> trusted,
                           std::vector<AddedTokenMatch>& out) const {
  std::vector<AddedTokenMatch> first;
  for (const ByteRange& range : trusted) {
    first.clear();
    scan(text, range.begin, range.end, raw_, first);
    size_t cursor = range.begin;
    for (const AddedTokenMatch& m : first) {
      if (cursor < m.start) scan(text, cursor, m.start, normalized_, out);
      out.push_back(m);
      cursor = m.stop;
    }
    if (cursor < range.end) scan(text, cursor, range.end, normalized_, out);
  }
}

}  // namespace lg::text
