#include "text/grammar/automaton_builder.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace lg::text::grammar {

std::string GrammarError::toString() const {
  std::string s = keyword;
  if (!path.empty() || !keyword.empty()) s += " at '" + path + "'";
  return s + ": " + message;
}

uint32_t AutomatonBuilder::newState() {
  if (states_ >= limits_.max_nfa_states) overflow_ = true;
  return states_++;
}

void AutomatonBuilder::edge(uint32_t from, Kind kind, uint32_t to, uint8_t lo, uint8_t hi, uint32_t rule) {
  if (overflow_) return;  // stop growing memory; finish() refuses anyway
  edges_.push_back(Edge{from, kind, lo, hi, rule, to});
}

AutomatonBuilder::Frag AutomatonBuilder::empty() {
  const uint32_t s = newState();
  return {s, s};
}

AutomatonBuilder::Frag AutomatonBuilder::never() { return {newState(), newState()}; }

AutomatonBuilder::Frag AutomatonBuilder::range(uint8_t lo, uint8_t hi) {
  Frag f{newState(), newState()};
  edge(f.in, Kind::kByte, f.out, lo, hi);
  return f;
}

AutomatonBuilder::Frag AutomatonBuilder::literal(std::string_view bytes) {
  Frag f = empty();
  uint32_t cur = f.in;
  for (char c : bytes) {
    const uint32_t next = newState();
    edge(cur, Kind::kByte, next, static_cast<uint8_t>(c), static_cast<uint8_t>(c));
    cur = next;
  }
  f.out = cur;
  return f;
}

AutomatonBuilder::Frag AutomatonBuilder::seq(Frag a, Frag b) {
  edge(a.out, Kind::kEps, b.in);
  return {a.in, b.out};
}

AutomatonBuilder::Frag AutomatonBuilder::seq(std::initializer_list<Frag> parts) {
  Frag f = empty();
  for (const Frag& p : parts) f = seq(f, p);
  return f;
}

AutomatonBuilder::Frag AutomatonBuilder::alt(const std::vector<Frag>& alts) {
  Frag f{newState(), newState()};
  for (const Frag& a : alts) {
    edge(f.in, Kind::kEps, a.in);
    edge(a.out, Kind::kEps, f.out);
  }
  return f;
}

AutomatonBuilder::Frag AutomatonBuilder::opt(Frag f) {
  Frag r{newState(), newState()};
  edge(r.in, Kind::kEps, f.in);
  edge(f.out, Kind::kEps, r.out);
  edge(r.in, Kind::kEps, r.out);
  return r;
}

AutomatonBuilder::Frag AutomatonBuilder::star(Frag f) {
  Frag r{newState(), newState()};
  edge(r.in, Kind::kEps, f.in);
  edge(f.out, Kind::kEps, f.in);
  edge(f.out, Kind::kEps, r.out);
  edge(r.in, Kind::kEps, r.out);
  return r;
}

AutomatonBuilder::Frag AutomatonBuilder::plus(const Maker& make) { return seq(make(), star(make())); }

AutomatonBuilder::Frag AutomatonBuilder::repeat(const Maker& make, int64_t min, int64_t max) {
  Frag f = empty();
  for (int64_t i = 0; i < min && !overflow_; ++i) f = seq(f, make());
  if (max < 0) return seq(f, star(make()));
  // Optional copies nest so that the automaton stays linear: (x(x(x)?)?)?
  Frag tail = empty();
  for (int64_t i = min; i < max && !overflow_; ++i) tail = opt(seq(make(), tail));
  return seq(f, tail);
}

AutomatonBuilder::Frag AutomatonBuilder::call(uint32_t rule) {
  Frag f{newState(), newState()};
  edge(f.in, Kind::kCall, f.out, 0, 0, rule);
  return f;
}

uint32_t AutomatonBuilder::newRule(std::string name) {
  RuleInfo info;
  info.name = std::move(name);
  rules_.push_back(std::move(info));
  if (rules_.size() > limits_.max_rules) overflow_ = true;
  return static_cast<uint32_t>(rules_.size() - 1);
}

void AutomatonBuilder::defineRule(uint32_t rule, Frag body) {
  rules_[rule].start = body.in;
  rules_[rule].final = body.out;
  rules_[rule].defined = true;
}

void AutomatonBuilder::setOrigin(uint32_t rule, std::string keyword, std::string path) {
  rules_[rule].keyword = std::move(keyword);
  rules_[rule].path = std::move(path);
}

std::variant<Automaton, GrammarError> AutomatonBuilder::finish(uint32_t root) {
  if (overflow_) {
    return GrammarError{"(limits)", "", "the grammar needs more than " + std::to_string(limits_.max_nfa_states) +
                                            " automaton states or " + std::to_string(limits_.max_rules) +
                                            " rules (Limits)"};
  }
  // Adjacency of the NFA.
  std::vector<uint32_t> first(states_ + 1, 0);
  for (const Edge& e : edges_) ++first[e.from + 1];
  for (uint32_t i = 0; i < states_; ++i) first[i + 1] += first[i];
  std::vector<uint32_t> order(edges_.size());
  {
    std::vector<uint32_t> fill(first.begin(), first.end() - 1);
    for (uint32_t i = 0; i < edges_.size(); ++i) order[fill[edges_[i].from]++] = i;
  }

  std::vector<uint32_t> mark(states_, 0);
  uint32_t epoch = 0;
  auto closure = [&](std::vector<uint32_t>& set) {
    ++epoch;
    for (uint32_t s : set) mark[s] = epoch;
    for (size_t i = 0; i < set.size(); ++i) {
      const uint32_t s = set[i];
      for (uint32_t k = first[s]; k < first[s + 1]; ++k) {
        const Edge& e = edges_[order[k]];
        if (e.kind == Kind::kEps && mark[e.to] != epoch) {
          mark[e.to] = epoch;
          set.push_back(e.to);
        }
      }
    }
    std::sort(set.begin(), set.end());
  };

  Automaton a;
  a.root_rule = root;
  a.rule_start.resize(rules_.size());
  for (const RuleInfo& r : rules_) a.rule_names.push_back(r.name);
  struct Pending {
    std::vector<std::pair<uint8_t, uint8_t>> ranges;
    std::vector<uint32_t> range_targets;
    std::vector<std::pair<uint32_t, uint32_t>> calls;  // rule, target
  };
  std::vector<Pending> pending;  // per global node
  std::vector<uint32_t> rule_of;

  for (uint32_t r = 0; r < rules_.size(); ++r) {
    if (!rules_[r].defined) {
      return GrammarError{"(internal)", "", "rule '" + rules_[r].name + "' was never defined"};
    }
    std::map<std::vector<uint32_t>, uint32_t> ids;
    std::vector<std::vector<uint32_t>> sets;
    auto intern = [&](std::vector<uint32_t> set) -> uint32_t {
      closure(set);
      auto it = ids.find(set);
      if (it != ids.end()) return it->second;
      const uint32_t id = static_cast<uint32_t>(a.nodes.size());
      a.nodes.emplace_back();
      pending.emplace_back();
      rule_of.push_back(r);
      a.nodes.back().final = std::binary_search(set.begin(), set.end(), rules_[r].final);
      ids.emplace(set, id);
      sets.push_back(std::move(set));
      return id;
    };
    const uint32_t base = static_cast<uint32_t>(a.nodes.size());
    a.rule_start[r] = intern({rules_[r].start});
    for (size_t i = 0; i < sets.size(); ++i) {
      if (a.nodes.size() > limits_.max_nodes) {
        return GrammarError{"(limits)", "", "the grammar needs more than " + std::to_string(limits_.max_nodes) +
                                                " automaton states (Limits::max_nodes)"};
      }
      const std::vector<uint32_t> set = sets[i];  // copy: sets grows
      std::vector<uint16_t> cuts{0, 256};
      std::map<uint32_t, std::vector<uint32_t>> call_targets;
      std::vector<const Edge*> byte_edges;
      for (uint32_t s : set) {
        for (uint32_t k = first[s]; k < first[s + 1]; ++k) {
          const Edge& e = edges_[order[k]];
          if (e.kind == Kind::kByte) {
            byte_edges.push_back(&e);
            cuts.push_back(e.lo);
            cuts.push_back(static_cast<uint16_t>(e.hi + 1));
          } else if (e.kind == Kind::kCall) {
            call_targets[e.rule].push_back(e.to);
          }
        }
      }
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      Pending p;
      for (size_t c = 0; c + 1 < cuts.size(); ++c) {
        const uint16_t lo = cuts[c], hi = static_cast<uint16_t>(cuts[c + 1] - 1);
        std::vector<uint32_t> targets;
        for (const Edge* e : byte_edges) {
          if (e->lo <= lo && hi <= e->hi) targets.push_back(e->to);
        }
        if (targets.empty()) continue;
        const uint32_t t = intern(std::move(targets));
        if (!p.ranges.empty() && p.range_targets.back() == t && p.ranges.back().second + 1 == lo) {
          p.ranges.back().second = static_cast<uint8_t>(hi);
        } else {
          p.ranges.emplace_back(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
          p.range_targets.push_back(t);
        }
      }
      for (auto& [rule, targets] : call_targets) p.calls.emplace_back(rule, intern(std::move(targets)));
      pending[base + i] = std::move(p);
    }
  }

  // Liveness: a node is live when it can reach its rule's end through bytes
  // and calls of productive rules; a rule is productive when its start is live.
  const size_t n = a.nodes.size();
  std::vector<char> live(n, 0), productive(rules_.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = n; i-- > 0;) {
      if (live[i]) continue;
      bool l = a.nodes[i].final;
      for (size_t k = 0; !l && k < pending[i].ranges.size(); ++k) l = live[pending[i].range_targets[k]];
      for (size_t k = 0; !l && k < pending[i].calls.size(); ++k) {
        l = productive[pending[i].calls[k].first] && live[pending[i].calls[k].second];
      }
      if (l) {
        live[i] = 1;
        changed = true;
        if (a.rule_start[rule_of[i]] == i) productive[rule_of[i]] = 1;
      }
    }
  }
  if (!productive[root]) {
    // Name the most specific origin: an unproductive rule that has one.
    for (uint32_t r = 0; r < rules_.size(); ++r) {
      if (!productive[r] && !rules_[r].keyword.empty() && r != root) {
        return GrammarError{rules_[r].keyword, rules_[r].path,
                            "no finite value matches here (recursion without a base case or contradictory "
                            "constraints)"};
      }
    }
    return GrammarError{rules_[root].keyword, rules_[root].path, "no value matches the schema"};
  }
  // Emit trimmed edges.
  for (size_t i = 0; i < n; ++i) {
    AutomatonNode& node = a.nodes[i];
    node.bytes_begin = static_cast<uint32_t>(a.bytes.size());
    for (size_t k = 0; k < pending[i].ranges.size(); ++k) {
      const uint32_t t = pending[i].range_targets[k];
      if (live[t]) a.bytes.push_back(ByteEdge{pending[i].ranges[k].first, pending[i].ranges[k].second, t});
    }
    node.bytes_end = static_cast<uint32_t>(a.bytes.size());
    node.calls_begin = static_cast<uint32_t>(a.calls.size());
    for (auto [rule, t] : pending[i].calls) {
      if (productive[rule] && live[t]) a.calls.push_back(CallEdge{rule, t});
    }
    node.calls_end = static_cast<uint32_t>(a.calls.size());
  }

  // Nullable rules, then left recursion: a rule that can call itself (through
  // nullable calls) before consuming a byte would make closures infinite.
  std::vector<char> nullable(rules_.size(), 0);
  auto epsReach = [&](uint32_t rule, std::vector<uint32_t>* called) {
    // Nodes reachable from the rule's start without consuming a byte.
    std::vector<uint32_t> stack{a.rule_start[rule]};
    std::vector<char> seen(0);
    std::unordered_map<uint32_t, char> visited;
    bool reaches_final = false;
    while (!stack.empty()) {
      const uint32_t v = stack.back();
      stack.pop_back();
      if (visited.count(v)) continue;
      visited[v] = 1;
      if (a.nodes[v].final) reaches_final = true;
      for (uint32_t k = a.nodes[v].calls_begin; k < a.nodes[v].calls_end; ++k) {
        if (called) called->push_back(a.calls[k].rule);
        if (nullable[a.calls[k].rule]) stack.push_back(a.calls[k].ret);
      }
    }
    return reaches_final;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t r = 0; r < rules_.size(); ++r) {
      if (productive[r] && !nullable[r] && epsReach(r, nullptr)) nullable[r] = changed = true;
    }
  }
  std::vector<std::vector<uint32_t>> left(rules_.size());
  for (uint32_t r = 0; r < rules_.size(); ++r) {
    if (productive[r]) epsReach(r, &left[r]);
  }
  std::vector<uint8_t> color(rules_.size(), 0);  // 0 new, 1 on path, 2 done
  std::optional<uint32_t> cyclic;
  std::function<void(uint32_t)> dfs = [&](uint32_t r) {
    color[r] = 1;
    for (uint32_t c : left[r]) {
      if (cyclic) return;
      if (color[c] == 1) {
        cyclic = c;
        return;
      }
      if (color[c] == 0) dfs(c);
    }
    color[r] = 2;
  };
  for (uint32_t r = 0; r < rules_.size() && !cyclic; ++r) {
    if (productive[r] && color[r] == 0) dfs(r);
  }
  if (cyclic) {
    return GrammarError{rules_[*cyclic].keyword.empty() ? "$ref" : rules_[*cyclic].keyword, rules_[*cyclic].path,
                        "recursion that consumes no input (left recursion)"};
  }
  return a;
}

}  // namespace lg::text::grammar
