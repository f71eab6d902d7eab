// Matcher: one sequence's position in a grammar, over a vocabulary.
//
//   fillNextTokenMask(mask)  bit i of word i/32 set <=> token i may come next:
//                            some completion of the output with it still
//                            matches (exact, never an approximation);
//   accept(token)            advances (false: not allowed, state unchanged);
//   rollback(n)              undoes the last n accepted tokens (stop strings,
//                            speculative paths);
//   canEnd()                 the output so far is a complete match (EOS allowed);
//   mustEnd()                no token can extend it.
// Special tokens are never set in the mask: the caller allows EOS when
// canEnd(). The design (token tables, suffix checks): docs/grammar.md.
//
// Thread-compatible: one Matcher per sequence; the grammar and vocabulary may
// be shared.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "text/grammar/grammar.h"
#include "text/grammar/stack_machine.h"
#include "text/grammar/token_table.h"
#include "text/grammar/vocabulary.h"

namespace lg::text::grammar {

class Matcher {
 public:
  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab);

  // `bitmask` has at least vocabulary().maskWords() words.
  void fillNextTokenMask(std::span<uint32_t> bitmask);
  [[nodiscard]] bool accept(int32_t token);
  // Raw bytes (forced text, tests): all or nothing, counts as one step for rollback.
  [[nodiscard]] bool acceptBytes(std::string_view bytes);
  // n <= acceptedCount().
  void rollback(int n_tokens);
  void reset();

  bool canEnd() const { return history_.back().accept; }
  bool mustEnd() const { return history_.back().heads.empty(); }
  int acceptedCount() const { return static_cast<int>(history_.size()) - 1; }
  const Vocabulary& vocabulary() const { return *vocab_; }

 private:
  void computeMask(const StateSet& state, std::vector<uint32_t>& mask);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::shared_ptr<TokenTable> table_;
  StackArena arena_;
  Stepper stepper_;
  SortedWalker walker_;
  std::vector<StateSet> history_;
  StateSet scratch_, scratch2_, init_;
  std::vector<uint32_t> nodes_seen_;
  struct CachedMask {
    std::vector<uint32_t> heads;
    std::vector<uint32_t> mask;
    uint64_t used = 0;
  };
  std::vector<CachedMask> cache_;  // small LRU keyed by the state's heads
  uint64_t clock_ = 0;
};

}  // namespace lg::text::grammar
