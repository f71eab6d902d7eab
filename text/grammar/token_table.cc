#include "text/grammar/token_table.h"

#include <algorithm>
#include <map>
#include <unordered_map>

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

// Builds node tables. The state sets met while walking tokens from a node
// (with the sentinel as parent) repeat heavily (inside a string it is one or
// two sets whatever the token), so they are interned and their byte
// transitions memoized: a lazily built DFA over state sets, shared by every
// node built with the same Builder (prepareAll builds all of them with one).
class TokenTable::Builder {
 public:
  Builder(const Automaton& a, const Vocabulary& v)
      : v_(v), stepper_(a, arena_), a_(a), ids_(v.maxTokenBytes() + 2), popped_below_(v.maxTokenBytes() + 2) {}

  std::unique_ptr<NodeTokens> build(uint32_t node) {
    const Vocabulary& v = v_;
    const std::span<const int32_t> sorted = v.sorted();
    const std::span<const uint16_t> lcp = v.lcp();
    StateSet init;
    stepper_.startAt(node, StackArena::kSentinel, init);
    ids_[0] = intern(init);
    popped_below_[0] = 0;
    always_.clear();
    by_suffix_.clear();
    auto record = [&](std::string_view s, int32_t id, size_t last) {
      for (size_t d = 1; d <= last; ++d) {
        if (info_[ids_[d]].popped) by_suffix_.emplace_back(s.substr(d), id);
      }
    };
    // A walk over the sorted tokens (the token trie in array form) whose
    // first byte the node has an edge for (others die at once, with nothing
    // to record): a token reuses the states of the prefix it shares with the
    // previous one, and a rejected prefix skips its whole trie subtree unless
    // the rule finished on the way (then every token below it has suffix
    // entries).
    const AutomatonNode& nd = a_.nodes[node];
    for (uint32_t k = nd.bytes_begin; k < nd.bytes_end; ++k) {
      const ByteEdge& e = a_.bytes[k];
      const size_t range_end = v.firstByteBegin(e.hi + 1);
      size_t valid = 0;  // ids_[0..valid] are those of the previous token's prefix
      for (size_t i = v.firstByteBegin(e.lo); i < range_end;) {
        const int32_t id = sorted[i];
        const std::string_view s = v.bytes(id);
        size_t depth = std::min<size_t>(valid, lcp[i]);
        bool dead = false;
        while (depth < s.size()) {
          const uint32_t next = step(ids_[depth], static_cast<uint8_t>(s[depth]));
          ids_[depth + 1] = next;
          popped_below_[depth + 1] = popped_below_[depth] | info_[next].popped;
          if (info_[next].dead) {
            dead = true;
            break;
          }
          ++depth;
        }
        valid = depth;
        if (!dead) {  // every byte stepped with live heads: accepted inside
          always_.push_back(id);
          ++i;
          continue;
        }
        // Byte `depth` was rejected: the prefix of length len = depth + 1 is dead.
        const size_t len = depth + 1;
        const Info& last = info_[ids_[len]];
        if (s.size() == len && (last.accept || last.popped)) {
          always_.push_back(id);  // finished exactly at the token's end
        } else {
          record(s, id, std::min(len, s.size() - 1));
        }
        ++i;
        if (!popped_below_[len]) {
          i = std::min(v.subtreeEnd(i - 1, len), range_end);
        } else {
          for (; i < range_end && lcp[i] >= len; ++i) record(v.bytes(sorted[i]), sorted[i], len);
        }
      }
    }

    auto out = std::make_unique<NodeTokens>();
    if (always_.size() * 32 >= static_cast<size_t>(v.size())) {
      out->always_bits.assign(v.maskWords(), 0);
      for (int32_t id : always_) out->always_bits[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
    } else {
      out->always_list = always_;
      std::sort(out->always_list.begin(), out->always_list.end());
    }
    std::sort(by_suffix_.begin(), by_suffix_.end());
    for (size_t k = 0; k < by_suffix_.size(); ++k) {
      if (k == 0 || by_suffix_[k].first != by_suffix_[k - 1].first) {
        out->suffixes.emplace_back(by_suffix_[k].first);
        out->suffix_begin.push_back(static_cast<uint32_t>(out->suffix_tokens.size()));
      }
      out->suffix_tokens.push_back(by_suffix_[k].second);
    }
    out->suffix_begin.push_back(static_cast<uint32_t>(out->suffix_tokens.size()));
    return out;
  }

 private:
  static constexpr uint32_t kUnknown = UINT32_MAX;
  struct Info {
    uint8_t dead, accept, popped;
  };

  uint32_t intern(const StateSet& s) {
    key_.assign(reinterpret_cast<const char*>(s.heads.data()), s.heads.size() * sizeof(uint32_t));
    key_.push_back(static_cast<char>(s.accept | (s.popped << 1)));
    auto [it, inserted] = index_.emplace(key_, static_cast<uint32_t>(sets_.size()));
    if (inserted) {
      sets_.push_back(s);
      info_.push_back({static_cast<uint8_t>(s.heads.empty()), static_cast<uint8_t>(s.accept),
                       static_cast<uint8_t>(s.popped)});
      trans_.resize(trans_.size() + 256, kUnknown);
    }
    return it->second;
  }

  uint32_t step(uint32_t from, uint8_t byte) {
    const size_t k = static_cast<size_t>(from) * 256 + byte;
    if (trans_[k] != kUnknown) return trans_[k];
    stepper_.step(sets_[from], byte, scratch_);
    const uint32_t to = intern(scratch_);
    trans_[k] = to;
    return to;
  }

  const Vocabulary& v_;
  StackArena arena_;
  Stepper stepper_;
  const Automaton& a_;
  std::vector<StateSet> sets_;
  std::vector<Info> info_;
  std::vector<uint32_t> trans_;  // sets_.size() * 256
  std::unordered_map<std::string, uint32_t> index_;
  std::string key_;
  StateSet scratch_;
  std::vector<uint32_t> ids_;         // ids_[d]: the state after the current token's first d bytes
  std::vector<uint8_t> popped_below_; // the sentinel was popped at some depth in [1, d]
  std::vector<int32_t> always_;
  std::vector<std::pair<std::string_view, int32_t>> by_suffix_;
};

const TokenTable::NodeTokens& TokenTable::forNode(uint32_t node) {
  const uint32_t c = class_of_[node];
  if (const NodeTokens* t = entries_[c].load(std::memory_order_acquire)) return *t;
  std::lock_guard<std::mutex> lock(mutex_);
  if (const NodeTokens* t = entries_[c].load(std::memory_order_acquire)) return *t;
  Builder builder(automaton_, *vocab_);
  owned_.push_back(builder.build(class_rep_[c]));
  entries_[c].store(owned_.back().get(), std::memory_order_release);
  return *owned_.back();
}

size_t TokenTable::builtCount() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return owned_.size();
}

void TokenTable::prepareAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  Builder builder(automaton_, *vocab_);
  for (size_t c = 0; c < class_rep_.size(); ++c) {
    if (entries_[c].load(std::memory_order_acquire) != nullptr) continue;
    owned_.push_back(builder.build(class_rep_[c]));
    entries_[c].store(owned_.back().get(), std::memory_order_release);
  }
  prepared_.store(true, std::memory_order_release);
}

}  // namespace lg::text::grammar
