// TokenTable: per automaton node, which tokens are allowed whatever the stack
// below the node's rule holds (context-independent), and which depend on it.
//
// For a head (node n, parent stack p), a token is walked from n with an
// unknown parent (the sentinel). Along every path it either stays inside n's
// rule (and the rules it calls), or n's rule finishes after d bytes and the
// rest must be accepted by whatever p continues with. So:
//   - accepted inside, or finished exactly at the token's end: allowed for
//     every p (every reachable stack has a completion: the builder trims dead
//     states), stored in `always`;
//   - otherwise, for each d where the rule finished: the token is allowed iff
//     p's continuation accepts the suffix token[d:]. Tokens are grouped by
//     that suffix (few distinct ones: `",`, `"}` ...) and the matcher checks
//     each suffix once against the real stack.
// Built all at once by prepareAll() (Grammar::prepare, off the engine
// thread), else lazily per node on first use; thread-safe (shared by all
// matchers of a grammar and vocabulary).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "text/grammar/grammar.h"
#include "text/grammar/vocabulary.h"

namespace lg::text::grammar {

class TokenTable {
 public:
  struct NodeTokens {
    std::vector<uint32_t> always_bits;  // a bitmask over the vocabulary when dense, else empty
    std::vector<int32_t> always_list;   // the ids when sparse
    std::vector<std::string> suffixes;  // sorted, distinct
    std::vector<uint32_t> suffix_begin; // suffix i's tokens: suffix_tokens[begin[i], begin[i+1])
    std::vector<int32_t> suffix_tokens;
  };

  TokenTable(std::shared_ptr<const Vocabulary> vocab, const Automaton& automaton);
  const NodeTokens& forNode(uint32_t node);
  size_t classCount() const { return class_rep_.size(); }
  // Tables built so far (one per class at most); tests check that masks
  // after prepareAll() build none.
  size_t builtCount() const;
  // Builds every node's table now (Grammar::prepare).
  void prepareAll();
  bool prepared() const { return prepared_.load(std::memory_order_acquire); }
  const Vocabulary& vocabulary() const { return *vocab_; }

 private:
  class Builder;

  // Nodes that behave alike (same finality, byte edges to equivalent
  // targets, calls of equivalent rules returning to equivalent nodes: a
  // bisimulation, found by partition refinement) have equal tables and share
  // one: a JSON string's body is several such states, and each string
  // property has its own copies.
  std::vector<uint32_t> class_of_;  // node -> class
  std::vector<uint32_t> class_rep_; // class -> a node of it

  std::shared_ptr<const Vocabulary> vocab_;  // kept alive: tables are keyed by its address
  const Automaton& automaton_;
  mutable std::mutex mutex_;
  std::unique_ptr<std::atomic<const NodeTokens*>[]> entries_;  // per class
  std::vector<std::unique_ptr<NodeTokens>> owned_;
  std::atomic<bool> prepared_{false};
};

}  // namespace lg::text::grammar
