// The pushdown automaton's runtime: stacks interned in an arena (a stack is a
// (node, parent stack) pair, so equal stacks have equal ids and state sets
// compare by value), state sets (the heads of all live stacks: nondeterminism
// of anyOf is a set, not backtracking), the byte step with its closure, and a
// walk over byte strings in sorted order that reuses the states of common
// prefixes and skips every string under a rejected prefix.
// Internal to text/grammar. Not thread-safe: one arena per user.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "text/grammar/grammar.h"

namespace lg::text::grammar {

class StackArena {
 public:
  static constexpr uint32_t kBottom = 0;    // the empty stack: popping it ends the grammar
  static constexpr uint32_t kSentinel = 1;  // an unknown context (token tables): popping it is recorded

  StackArena();
  uint32_t intern(uint32_t node, uint32_t parent);
  uint32_t node(uint32_t id) const { return frames_[id].node; }
  uint32_t parent(uint32_t id) const { return frames_[id].parent; }
  size_t size() const { return frames_.size(); }

 private:
  struct Frame {
    uint32_t node, parent;
  };
  void grow();
  std::vector<Frame> frames_;
  std::vector<uint64_t> keys_;  // open addressing: key+1, 0 empty
  std::vector<uint32_t> vals_;
  size_t mask_ = 0;
};

struct StateSet {
  std::vector<uint32_t> heads;  // sorted stack ids whose top node has byte edges
  bool accept = false;          // the root rule can finish here
  bool popped = false;          // the sentinel frame was popped here (token tables)
  bool alive() const { return !heads.empty() || accept || popped; }
  void clear() {
    heads.clear();
    accept = popped = false;
  }
  bool operator==(const StateSet& o) const { return heads == o.heads && accept == o.accept && popped == o.popped; }
};

class Stepper {
 public:
  Stepper(const Automaton& a, StackArena& arena) : a_(a), arena_(arena) {}
  void start(StateSet& out);                                      // the root rule, on an empty stack
  void startAt(uint32_t node, uint32_t parent, StateSet& out);    // one head, no closure of `node`
  void continueAfter(uint32_t frame, StateSet& out);              // closure of a return into `frame`
  void step(const StateSet& in, uint8_t byte, StateSet& out);
  bool feed(StateSet& state, std::string_view bytes, StateSet& scratch);  // false: rejected somewhere

 private:
  void close(uint32_t node, uint32_t parent, StateSet& out);
  void begin();
  const Automaton& a_;
  StackArena& arena_;
  std::vector<uint32_t> stamp_;
  uint32_t epoch_ = 0;
};

// Walks byte strings given in sorted order from `init`. For each string
// calls visit(index, ok, states, reached): ok when every byte was accepted and
// the final state is alive; states[d] is the state after d bytes for
// d <= reached (reached < size when a byte was rejected: states[reached] is the
// dead state, which may still carry accept/popped).
class SortedWalker {
 public:
  SortedWalker(Stepper& stepper, size_t max_len) : stepper_(stepper), states_(max_len + 2) {}
  template <typename GetBytes, typename Visit>
  void walk(const StateSet& init, size_t count, GetBytes&& get, Visit&& visit) {
    states_[0] = init;
    size_t valid = 0;
    bool dead = false;
    std::string_view prev;
    for (size_t i = 0; i < count; ++i) {
      const std::string_view s = get(i);
      size_t l = 0;
      const size_t m = std::min(prev.size(), s.size());
      while (l < m && prev[l] == s[l]) ++l;
      prev = s;
      if (dead && l > valid) {
        const bool ok = s.size() == valid + 1 && (states_[valid + 1].accept || states_[valid + 1].popped);
        visit(i, ok, states_, valid + 1);
        continue;
      }
      valid = std::min(valid, l);
      dead = false;
      while (valid < s.size()) {
        stepper_.step(states_[valid], static_cast<uint8_t>(s[valid]), states_[valid + 1]);
        if (states_[valid + 1].heads.empty()) {
          dead = true;
          break;
        }
        ++valid;
      }
      if (dead) {
        const bool ok = s.size() == valid + 1 && (states_[valid + 1].accept || states_[valid + 1].popped);
        visit(i, ok, states_, valid + 1);
      } else {
        visit(i, states_[valid].alive(), states_, valid);
      }
    }
  }

 private:
  Stepper& stepper_;
  std::vector<StateSet> states_;
};

}  // namespace lg::text::grammar
