#include "text/grammar/matcher.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace lg::text::grammar {

namespace {
constexpr size_t kCachedMasks = 8;
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab)
    : grammar_(std::move(grammar)),
      vocab_(std::move(vocab)),
      table_(grammar_->tokenTable(vocab_)),
      stepper_(grammar_->automaton(), arena_),
      walker_(stepper_, vocab_->maxTokenBytes()) {
  reset();
}

void Matcher::reset() {
  history_.assign(1, StateSet{});
  stepper_.start(history_[0]);
}

bool Matcher::acceptBytes(std::string_view bytes) {
  StateSet next = history_.back();
  if (bytes.empty() || !stepper_.feed(next, bytes, scratch_)) return false;
  history_.push_back(std::move(next));
  return true;
}

bool Matcher::accept(int32_t token) {
  if (!vocab_->matchable(token)) return false;
  return acceptBytes(vocab_->bytes(token));
}

void Matcher::rollback(int n_tokens) {
  assert(n_tokens >= 0 && n_tokens <= acceptedCount());
  history_.resize(history_.size() - static_cast<size_t>(n_tokens));
}

void Matcher::fillNextTokenMask(std::span<uint32_t> bitmask) {
  const StateSet& state = history_.back();
  ++clock_;
  for (CachedMask& c : cache_) {
    if (c.heads == state.heads) {
      c.used = clock_;
      std::memcpy(bitmask.data(), c.mask.data(), c.mask.size() * sizeof(uint32_t));
      return;
    }
  }
  CachedMask* slot;
  if (cache_.size() < kCachedMasks) {
    slot = &cache_.emplace_back();
  } else {
    slot = &*std::min_element(cache_.begin(), cache_.end(),
                              [](const CachedMask& a, const CachedMask& b) { return a.used < b.used; });
  }
  slot->heads = state.heads;
  slot->used = clock_;
  computeMask(state, slot->mask);
  std::memcpy(bitmask.data(), slot->mask.data(), slot->mask.size() * sizeof(uint32_t));
}

void Matcher::computeMask(const StateSet& state, std::vector<uint32_t>& mask) {
  mask.assign(vocab_->maskWords(), 0);
  uint32_t* m = mask.data();
  const size_t words = mask.size();
  nodes_seen_.clear();
  for (uint32_t h : state.heads) {
    const uint32_t node = arena_.node(h);
    if (std::find(nodes_seen_.begin(), nodes_seen_.end(), node) != nodes_seen_.end()) continue;
    nodes_seen_.push_back(node);
    const TokenTable::NodeTokens& t = table_->forNode(node);
    if (!t.always_bits.empty()) {
      const uint32_t* a = t.always_bits.data();
      for (size_t w = 0; w < words; ++w) m[w] |= a[w];
    } else {
      for (int32_t id : t.always_list) m[id / 32] |= 1u << (id % 32);
    }
  }
  for (uint32_t h : state.heads) {
    const TokenTable::NodeTokens& t = table_->forNode(arena_.node(h));
    if (t.suffixes.empty()) continue;
    const uint32_t parent = arena_.parent(h);
    if (parent == StackArena::kBottom) continue;  // nothing follows the root
    stepper_.continueAfter(parent, init_);
    walker_.walk(
        init_, t.suffixes.size(), [&](size_t i) { return std::string_view(t.suffixes[i]); },
        [&](size_t i, bool ok, const std::vector<StateSet>&, size_t) {
          if (!ok) return;
          for (uint32_t k = t.suffix_begin[i]; k < t.suffix_begin[i + 1]; ++k) {
            const int32_t id = t.suffix_tokens[k];
            m[id / 32] |= 1u << (id % 32);
          }
        });
  }
}

}  // namespace lg::text::grammar
