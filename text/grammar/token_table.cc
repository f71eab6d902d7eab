#include "text/grammar/token_table.h"

#include <algorithm>
#include <map>

#include "text/grammar/stack_machine.h"

namespace lg::text::grammar {

namespace {

// Moore-style refinement: a node's signature is its class, finality, byte
// edges (adjacent ranges to the same class merged) and calls, in classes;
// repeat until the number of classes stops growing.
std::vector<uint32_t> equivalentNodes(const Automaton& a, size_t* count) {
  const size_t n = a.nodes.size();
  std::vector<uint32_t> cls(n, 0), next(n);
  size_t classes = 1;
  std::map<std::vector<uint32_t>, uint32_t> ids;
  std::vector<uint32_t> sig;
  for (;;) {
    ids.clear();
    for (size_t i = 0; i < n; ++i) {
      const AutomatonNode& nd = a.nodes[i];
      sig.assign({cls[i], nd.final ? 1u : 0u});
      for (uint32_t k = nd.bytes_begin; k < nd.bytes_end; ++k) {
        const ByteEdge& e = a.bytes[k];
        const uint32_t t = cls[e.target];
        if (sig.size() > 2 && sig[sig.size() - 2] + 1 == e.lo && sig.back() == t) {
          sig[sig.size() - 2] = e.hi;  // extends the previous range
          continue;
        }
        sig.insert(sig.end(), {e.lo, e.hi, t});
      }
      sig.push_back(UINT32_MAX);
      for (uint32_t k = nd.calls_begin; k < nd.calls_end; ++k) {
        const CallEdge& c = a.calls[k];
        sig.insert(sig.end(), {cls[a.rule_start[c.rule]], cls[c.ret]});
      }
      next[i] = ids.emplace(sig, static_cast<uint32_t>(ids.size())).first->second;
    }
    cls.swap(next);
    if (ids.size() == classes) break;
    classes = ids.size();
  }
  *count = classes;
  return cls;
}

}  // namespace

TokenTable::TokenTable(std::shared_ptr<const Vocabulary> vocab, const Automaton& automaton)
    : vocab_(std::move(vocab)), automaton_(automaton) {
  size_t classes = 0;
  class_of_ = equivalentNodes(automaton, &classes);
  class_rep_.assign(classes, UINT32_MAX);
  for (uint32_t i = 0; i < class_of_.size(); ++i) {
    if (class_rep_[class_of_[i]] == UINT32_MAX) class_rep_[class_of_[i]] = i;
  }
  entries_.reset(new std::atomic<const NodeTokens*>[classes]);
  for (size_t i = 0; i < classes; ++i) entries_[i].store(nullptr, std::memory_order_relaxed);
}

const TokenTable::NodeTokens& TokenTable::forNode(uint32_t node) {
  const uint32_t c = class_of_[node];
  if (const NodeTokens* t = entries_[c].load(std::memory_order_acquire)) return *t;
  std::lock_guard<std::mutex> lock(mutex_);
  if (const NodeTokens* t = entries_[c].load(std::memory_order_acquire)) return *t;
  owned_.push_back(build(class_rep_[c]));
  entries_[c].store(owned_.back().get(), std::memory_order_release);
  return *owned_.back();
}

void TokenTable::prepareAll() {
  for (uint32_t rep : class_rep_) forNode(rep);
  prepared_.store(true, std::memory_order_release);
}

std::unique_ptr<TokenTable::NodeTokens> TokenTable::build(uint32_t node) {
  const Vocabulary& v = *vocab_;
  StackArena arena;
  Stepper stepper(automaton_, arena);
  const std::span<const int32_t> sorted = v.sorted();
  const std::span<const uint16_t> lcp = v.lcp();
  const size_t max_len = v.maxTokenBytes();
  // states[d]: the state after the first d bytes of the current token;
  // popped_below[d]: the sentinel was popped at some depth in [1, d].
  std::vector<StateSet> states(max_len + 2);
  std::vector<uint8_t> popped_below(max_len + 2, 0);
  stepper.startAt(node, StackArena::kSentinel, states[0]);

  std::vector<int32_t> always;
  std::vector<std::pair<std::string_view, int32_t>> by_suffix;
  auto record = [&](std::string_view s, int32_t id, size_t last) {
    for (size_t d = 1; d <= last; ++d) {
      if (states[d].popped) by_suffix.emplace_back(s.substr(d), id);
    }
  };
  // A walk over the sorted tokens (the token trie in array form): a token
  // reuses the states of the prefix it shares with the previous one, and a
  // rejected prefix skips its whole subtree unless the rule finished on the
  // way (then every token below it has suffix entries).
  size_t valid = 0;  // states[0..valid] are those of the previous token's prefix
  for (size_t i = 0; i < sorted.size();) {
    const int32_t id = sorted[i];
    const std::string_view s = v.bytes(id);
    size_t depth = std::min<size_t>(valid, lcp[i]);
    bool dead = false;
    while (depth < s.size()) {
      stepper.step(states[depth], static_cast<uint8_t>(s[depth]), states[depth + 1]);
      popped_below[depth + 1] = popped_below[depth] | static_cast<uint8_t>(states[depth + 1].popped);
      if (states[depth + 1].heads.empty()) {
        dead = true;
        break;
      }
      ++depth;
    }
    valid = depth;
    if (!dead) {  // every byte stepped with live heads: accepted inside
      always.push_back(id);
      ++i;
      continue;
    }
    // Byte `depth` was rejected: the prefix of length len = depth + 1 is dead.
    const size_t len = depth + 1;
    if (s.size() == len && (states[len].accept || states[len].popped)) {
      always.push_back(id);  // finished exactly at the token's end
    } else {
      record(s, id, std::min(len, s.size() - 1));
    }
    ++i;
    if (!popped_below[len]) {
      i = v.subtreeEnd(i - 1, len);
    } else {
      for (; i < sorted.size() && lcp[i] >= len; ++i) record(v.bytes(sorted[i]), sorted[i], len);
    }
  }

  auto out = std::make_unique<NodeTokens>();
  if (always.size() * 32 >= static_cast<size_t>(v.size())) {
    out->always_bits.assign(v.maskWords(), 0);
    for (int32_t id : always) out->always_bits[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  } else {
    std::sort(always.begin(), always.end());
    out->always_list = std::move(always);
  }
  std::sort(by_suffix.begin(), by_suffix.end());
  for (size_t k = 0; k < by_suffix.size(); ++k) {
    if (k == 0 || by_suffix[k].first != by_suffix[k - 1].first) {
      out->suffixes.emplace_back(by_suffix[k].first);
      out->suffix_begin.push_back(static_cast<uint32_t>(out->suffix_tokens.size()));
    }
    out->suffix_tokens.push_back(by_suffix[k].second);
  }
  out->suffix_begin.push_back(static_cast<uint32_t>(out->suffix_tokens.size()));
  return out;
}

}  // namespace lg::text::grammar
