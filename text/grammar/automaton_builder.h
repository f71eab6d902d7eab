// AutomatonBuilder: Thompson-style NFA fragments per rule, determinized per
// rule (call edges are symbols like bytes), then checked: every rule must
// derive a finite string (no recursion without a base case), no rule may
// reach itself without consuming a byte (left recursion), and dead states are
// trimmed so that every state a matcher can be in has a completion.
// Internal to text/grammar. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/grammar/grammar.h"

namespace lg::text::grammar {

class AutomatonBuilder {
 public:
  explicit AutomatonBuilder(const Limits& limits) : limits_(limits) {}

  struct Frag {
    uint32_t in = 0, out = 0;
  };
  using Maker = std::function<Frag()>;

  Frag empty();
  Frag never();  // matches nothing
  Frag range(uint8_t lo, uint8_t hi);
  Frag literal(std::string_view bytes);
  Frag seq(Frag a, Frag b);
  Frag seq(std::initializer_list<Frag> parts);
  Frag alt(const std::vector<Frag>& alts);
  Frag opt(Frag f);
  Frag star(Frag f);
  Frag plus(const Maker& make);
  // min..max copies (max < 0: unbounded).
  Frag repeat(const Maker& make, int64_t min, int64_t max);
  Frag call(uint32_t rule);

  uint32_t newRule(std::string name);
  void defineRule(uint32_t rule, Frag body);
  size_t ruleCount() const { return rules_.size(); }

  // The NFA grew past Limits::max_nfa_states (fragments keep being made but
  // finish() refuses).
  bool overflow() const { return overflow_; }

  // Determinizes, checks and trims. The error's keyword/path are filled with
  // the given context for problems found here (cycles, limits).
  std::variant<Automaton, GrammarError> finish(uint32_t root);

  // Names a rule's origin for errors found at finish() (unproductive rules).
  void setOrigin(uint32_t rule, std::string keyword, std::string path);

 private:
  enum class Kind : uint8_t { kEps, kByte, kCall };
  struct Edge {
    uint32_t from;
    Kind kind;
    uint8_t lo, hi;
    uint32_t rule;
    uint32_t to;
  };
  struct RuleInfo {
    std::string name;
    uint32_t start = 0, final = 0;
    bool defined = false;
    std::string keyword, path;
  };
  uint32_t newState();
  void edge(uint32_t from, Kind kind, uint32_t to, uint8_t lo = 0, uint8_t hi = 0, uint32_t rule = 0);

  Limits limits_;
  uint32_t states_ = 0;
  std::vector<Edge> edges_;
  std::vector<RuleInfo> rules_;
  bool overflow_ = false;
};

}  // namespace lg::text::grammar
