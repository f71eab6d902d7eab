#include "text/grammar/token_table.h"

#include <algorithm>
#include <map>

#include "text/grammar/stack_machine.h"

namespace lg::text::grammar {

TokenTable::TokenTable(std::shared_ptr<const Vocabulary> vocab, const Automaton& automaton)
    : vocab_(std::move(vocab)),
      automaton_(automaton),
      entries_(new std::atomic<const NodeTokens*>[automaton.nodes.size()]) {
  for (size_t i = 0; i < automaton.nodes.size(); ++i) entries_[i].store(nullptr, std::memory_order_relaxed);
}

const TokenTable::NodeTokens& TokenTable::forNode(uint32_t node) {
  if (const NodeTokens* t = entries_[node].load(std::memory_order_acquire)) return *t;
  std::lock_guard<std::mutex> lock(mutex_);
  if (const NodeTokens* t = entries_[node].load(std::memory_order_acquire)) return *t;
  owned_.push_back(build(node));
  entries_[node].store(owned_.back().get(), std::memory_order_release);
  return *owned_.back();
}

void TokenTable::prepareAll() {
  for (uint32_t n = 0; n < automaton_.nodes.size(); ++n) forNode(n);
  prepared_.store(true, std::memory_order_release);
}

std::unique_ptr<TokenTable::NodeTokens> TokenTable::build(uint32_t node) {
  const Vocabulary& v = *vocab_;
  StackArena arena;
  Stepper stepper(automaton_, arena);
  SortedWalker walker(stepper, v.maxTokenBytes());
  StateSet init;
  stepper.startAt(node, StackArena::kSentinel, init);

  std::vector<int32_t> always;
  std::map<std::string_view, std::vector<int32_t>> by_suffix;
  const std::span<const int32_t> sorted = v.sorted();
  walker.walk(
      init, sorted.size(), [&](size_t i) { return v.bytes(sorted[i]); },
      [&](size_t i, bool ok, const std::vector<StateSet>& states, size_t reached) {
        const int32_t id = sorted[i];
        if (ok) {
          always.push_back(id);
          return;
        }
        const std::string_view s = v.bytes(id);
        const size_t last = std::min(reached, s.size() - 1);
        for (size_t d = 1; d <= last; ++d) {
          if (states[d].popped) by_suffix[s.substr(d)].push_back(id);
        }
      });

  auto out = std::make_unique<NodeTokens>();
  if (always.size() * 32 >= static_cast<size_t>(v.size())) {
    out->always_bits.assign(v.maskWords(), 0);
    for (int32_t id : always) out->always_bits[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  } else {
    std::sort(always.begin(), always.end());
    out->always_list = std::move(always);
  }
  for (auto& [suffix, ids] : by_suffix) {
    out->suffixes.emplace_back(suffix);
    out->suffix_begin.push_back(static_cast<uint32_t>(out->suffix_tokens.size()));
    out->suffix_tokens.insert(out->suffix_tokens.end(), ids.begin(), ids.end());
  }
  out->suffix_begin.push_back(static_cast<uint32_t>(out->suffix_tokens.size()));
  return out;
}

}  // namespace lg::text::grammar
