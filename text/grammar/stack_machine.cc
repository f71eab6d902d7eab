#include "text/grammar/stack_machine.h"

#include <algorithm>

namespace lg::text::grammar {

namespace {
inline uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}
}  // namespace

StackArena::StackArena() {
  frames_.push_back({UINT32_MAX, UINT32_MAX});  // kBottom
  frames_.push_back({UINT32_MAX, UINT32_MAX});  // kSentinel
  keys_.assign(1024, 0);
  vals_.assign(1024, 0);
  mask_ = 1023;
}

void StackArena::grow() {
  std::vector<uint64_t> keys(keys_.size() * 2, 0);
  std::vector<uint32_t> vals(keys.size(), 0);
  const size_t mask = keys.size() - 1;
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i] == 0) continue;
    size_t h = mix(keys_[i]) & mask;
    while (keys[h] != 0) h = (h + 1) & mask;
    keys[h] = keys_[i];
    vals[h] = vals_[i];
  }
  keys_.swap(keys);
  vals_.swap(vals);
  mask_ = mask;
}

uint32_t StackArena::intern(uint32_t node, uint32_t parent) {
  const uint64_t key = ((static_cast<uint64_t>(node) << 32) | parent) + 1;
  size_t h = mix(key) & mask_;
  while (keys_[h] != 0) {
    if (keys_[h] == key) return vals_[h];
    h = (h + 1) & mask_;
  }
  const auto id = static_cast<uint32_t>(frames_.size());
  frames_.push_back({node, parent});
  keys_[h] = key;
  vals_[h] = id;
  if (frames_.size() * 2 > keys_.size()) grow();
  return id;
}

void Stepper::begin() {
  if (++epoch_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    epoch_ = 1;
  }
}

void Stepper::close(uint32_t node, uint32_t parent, StateSet& out) {
  const uint32_t id = arena_.intern(node, parent);
  if (id >= stamp_.size()) stamp_.resize(std::max<size_t>(arena_.size() * 2, 1024), 0);
  if (stamp_[id] == epoch_) return;
  stamp_[id] = epoch_;
  const AutomatonNode& n = a_.nodes[node];
  if (n.bytes_begin != n.bytes_end) out.heads.push_back(id);
  if (n.final) {
    if (parent == StackArena::kBottom) {
      out.accept = true;
    } else if (parent == StackArena::kSentinel) {
      out.popped = true;
    } else {
      close(arena_.node(parent), arena_.parent(parent), out);
    }
  }
  for (uint32_t k = n.calls_begin; k < n.calls_end; ++k) {
    const CallEdge& c = a_.calls[k];
    close(a_.rule_start[c.rule], arena_.intern(c.ret, parent), out);
  }
}

void Stepper::start(StateSet& out) {
  out.clear();
  begin();
  close(a_.rule_start[a_.root_rule], StackArena::kBottom, out);
  std::sort(out.heads.begin(), out.heads.end());
}

void Stepper::startAt(uint32_t node, uint32_t parent, StateSet& out) {
  out.clear();
  out.heads.push_back(arena_.intern(node, parent));
}

void Stepper::continueAfter(uint32_t frame, StateSet& out) {
  out.clear();
  begin();
  if (frame == StackArena::kBottom) {
    out.accept = true;
  } else if (frame == StackArena::kSentinel) {
    out.popped = true;
  } else {
    close(arena_.node(frame), arena_.parent(frame), out);
  }
  std::sort(out.heads.begin(), out.heads.end());
}

void Stepper::step(const StateSet& in, uint8_t byte, StateSet& out) {
  out.clear();
  begin();
  for (uint32_t h : in.heads) {
    const AutomatonNode& n = a_.nodes[arena_.node(h)];
    for (uint32_t k = n.bytes_begin; k < n.bytes_end; ++k) {
      const ByteEdge& e = a_.bytes[k];
      if (byte < e.lo) break;
      if (byte <= e.hi) {
        close(e.target, arena_.parent(h), out);
        break;  // edges of a node are disjoint
      }
    }
  }
  if (out.heads.size() > 1) std::sort(out.heads.begin(), out.heads.end());
}

bool Stepper::feed(StateSet& state, std::string_view bytes, StateSet& scratch) {
  for (char c : bytes) {
    if (state.heads.empty()) return false;
    step(state, static_cast<uint8_t>(c), scratch);
    std::swap(state, scratch);
  }
  return state.alive();
}

}  // namespace lg::text::grammar
