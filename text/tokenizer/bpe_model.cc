#include "text/tokenizer/bpe_model.h"

#include <algorithm>
#include <functional>

namespace lg::text {
namespace {

// Up to this many symbols a linear scan for the best pair beats a heap.
constexpr size_t kSmallWord = 48;
// From this many symbols on, the heap no longer fits in cache and the rank
// buckets win (when the merge table allows them).
constexpr size_t kHugeWord = 8192;

}  // namespace

void MergeTable::reserve(size_t merges) {
  size_t capacity = 16;
  unsigned bits = 4;
  while (capacity < merges * 2) {
    capacity <<= 1;
    ++bits;
  }
  entries_.assign(capacity, Entry{kEmpty, 0, 0});
  mask_ = capacity - 1;
  shift_ = 64 - bits;
  size_ = 0;
}

void MergeTable::insert(int32_t left, int32_t right, uint32_t rank, int32_t merged) {
  if ((size_ + 1) * 2 > entries_.size()) {
    std::vector<Entry> old = std::move(entries_);
    reserve(std::max<size_t>(size_ + 1, old.size()));
    for (const Entry& e : old) {
      if (e.key != kEmpty) insert(static_cast<int32_t>(e.key >> 32), static_cast<int32_t>(e.key & 0xffffffff), e.rank, e.merged);
    }
  }
  const uint64_t key = pack(left, right);
  for (size_t i = slot(key);; i = (i + 1) & mask_) {
    Entry& e = entries_[i];
    if (e.key == key) {
      e.rank = rank;
      e.merged = merged;
      return;
    }
    if (e.key == kEmpty) {
      e = Entry{key, rank, merged};
      ++size_;
      return;
    }
  }
}

BpeModel::BpeModel(const int32_t (&byte_ids)[256], MergeTable merges, std::vector<std::string> token_bytes,
                   bool ignore_merges)
    : merges_(std::move(merges)), ignore_merges_(ignore_merges) {
  std::copy(std::begin(byte_ids), std::end(byte_ids), byte_ids_);
  token_length_.resize(token_bytes.size());
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    token_length_[id] = static_cast<uint32_t>(token_bytes[id].size());
    if (ignore_merges_ && !token_bytes[id].empty()) by_bytes_.emplace(token_bytes[id], static_cast<int32_t>(id));
  }
  // Monotone: each merge ranks after every merge that can produce one of its
  // two parts. Then the library's process (always the lowest rank present)
  // never meets a rank lower than one it already merged, since a merge only
  // creates pairs containing its result.
  std::vector<int64_t> created_at(token_bytes.size(), -1);
  merges_.forEach([&](int32_t, int32_t, uint32_t rank, int32_t merged) {
    if (static_cast<size_t>(merged) >= created_at.size()) created_at.resize(static_cast<size_t>(merged) + 1, -1);
    created_at[static_cast<size_t>(merged)] = std::max<int64_t>(created_at[static_cast<size_t>(merged)], rank);
    rank_count_ = std::max(rank_count_, rank + 1);
  });
  monotone_ = true;
  merges_.forEach([&](int32_t left, int32_t right, uint32_t rank, int32_t) {
    auto made = [&](int32_t id) {
      return static_cast<size_t>(id) < created_at.size() ? created_at[static_cast<size_t>(id)] : int64_t{-1};
    };
    if (made(left) >= rank || made(right) >= rank) monotone_ = false;
  });
}

void BpeModel::encodeWord(std::string_view word, std::vector<int32_t>& out, std::vector<int32_t>& symbols) const {
  if (ignore_merges_) {
    // The library looks the whole word up before merging.
    auto it = by_bytes_.find(word);
    if (it != by_bytes_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() == 1) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(word[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  const bool cacheable = WordCache::cacheable(word);
  if (cacheable && cache_.lookup(word, out)) return;

  symbols.clear();
  for (char c : word) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) symbols.push_back(id);  // a byte the vocabulary lacks is dropped, as in the library
  }
  if (symbols.size() <= kSmallWord) {
    mergeSmall(symbols);
  } else if (symbols.size() < kHugeWord || !monotone_) {
    mergeLarge(symbols);
  } else {
    mergeHuge(symbols);
  }
  if (cacheable) cache_.insert(word, symbols.data(), symbols.size());
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeModel::mergeWith(Algorithm algorithm, std::string_view word, std::vector<int32_t>& out) const {
  std::vector<int32_t> symbols;
  for (char c : word) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) symbols.push_back(id);
  }
  if (algorithm == Algorithm::kScan) {
    // mergeSmall's arrays are fixed-size: run it on words it can hold only.
    if (symbols.size() > kSmallWord) return;
    mergeSmall(symbols);
  } else if (algorithm == Algorithm::kHeap) {
    mergeLarge(symbols);
  } else {
    if (!monotone_) return;
    mergeHuge(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeModel::mergeSmall(std::vector<int32_t>& symbols) const {
  int32_t merged[kSmallWord];
  uint32_t ranks[kSmallWord];
  size_t n = symbols.size();
  for (size_t i = 0; i + 1 < n; ++i) ranks[i] = merges_.find(symbols[i], symbols[i + 1], &merged[i]);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (ranks[i] < ranks[best]) best = i;  // strict: the leftmost wins ties
    }
    if (ranks[best] == MergeTable::kNoRank) break;
    symbols[best] = merged[best];
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    std::copy(ranks + best + 1, ranks + n - 1, ranks + best);
    std::copy(merged + best + 1, merged + n - 1, merged + best);
    --n;
    if (best > 0) ranks[best - 1] = merges_.find(symbols[best - 1], symbols[best], &merged[best - 1]);
    if (best + 1 < n) ranks[best] = merges_.find(symbols[best], symbols[best + 1], &merged[best]);
  }
}

void BpeModel::mergeLarge(std::vector<int32_t>& symbols) const {
  // Symbols stay at the index of their first byte; the slots they absorb hold
  // -1. A symbol's successor is at index + its byte length, its predecessor the
  // nearest live slot to the left (at most one token length away).
  const size_t n = symbols.size();
  // Heap entries (rank << 32 | index): popping the minimum gives the lowest
  // rank, then the leftmost index, the library's order. Entries go stale when
  // a neighbour changes; a popped entry is used only if the pair at its index
  // still has that rank (ranks identify merges).
  std::vector<uint64_t> heap;
  heap.reserve(n);
  int32_t merged = 0;
  for (size_t i = 0; i + 1 < n; ++i) {
    const uint32_t rank = merges_.find(symbols[i], symbols[i + 1], &merged);
    if (rank != MergeTable::kNoRank) heap.push_back((uint64_t{rank} << 32) | i);
  }
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  auto push = [&](uint32_t rank, size_t index) {
    heap.push_back((uint64_t{rank} << 32) | index);
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const uint64_t top = heap.back();
    heap.pop_back();
    const uint32_t rank = static_cast<uint32_t>(top >> 32);
    const size_t i = static_cast<size_t>(top & 0xffffffff);
    if (symbols[i] < 0) continue;
    const size_t j = i + slotLength(symbols[i]);
    if (j >= n) continue;
    if (merges_.find(symbols[i], symbols[j], &merged) != rank) continue;
    mergeSlots(symbols, i, j, merged, push);
  }
  compactSlots(symbols);
}

void BpeModel::mergeHuge(std::vector<int32_t>& symbols) const {
  // Same slot layout as mergeLarge. Pairs wait in the bucket of their rank;
  // ranks are taken in increasing order (monotone: a merge at rank r only
  // creates pairs of higher ranks), and within a rank by position, leftmost
  // first, which is the library's order.
  const size_t n = symbols.size();
  std::vector<std::vector<uint32_t>> buckets(rank_count_);
  std::vector<uint64_t> pending((rank_count_ + 63) / 64, 0);  // non-empty buckets
  auto push = [&](uint32_t rank, size_t index) {
    buckets[rank].push_back(static_cast<uint32_t>(index));
    pending[rank / 64] |= uint64_t{1} << (rank % 64);
  };
  int32_t merged = 0;
  for (size_t i = 0; i + 1 < n; ++i) {
    const uint32_t rank = merges_.find(symbols[i], symbols[i + 1], &merged);
    if (rank != MergeTable::kNoRank) push(rank, i);
  }
  std::vector<uint32_t> level;
  for (size_t word = 0; word < pending.size();) {
    if (pending[word] == 0) {
      ++word;
      continue;
    }
    const auto rank = static_cast<uint32_t>(word * 64 + static_cast<size_t>(__builtin_ctzll(pending[word])));
    pending[word] &= pending[word] - 1;
    level.swap(buckets[rank]);
    buckets[rank].clear();
    if (!std::is_sorted(level.begin(), level.end())) std::sort(level.begin(), level.end());
    for (const uint32_t index : level) {
      const size_t i = index;
      if (symbols[i] < 0) continue;
      const size_t j = i + slotLength(symbols[i]);
      if (j >= n || merges_.find(symbols[i], symbols[j], &merged) != rank) continue;  // stale
      mergeSlots(symbols, i, j, merged, push);
    }
    level.clear();
  }
  compactSlots(symbols);
}

template <typename Push>
void BpeModel::mergeSlots(std::vector<int32_t>& symbols, size_t i, size_t j, int32_t merged, Push&& push) const {
  symbols[i] = merged;
  symbols[j] = -1;
  int32_t next = 0;
  if (i > 0) {
    size_t p = i - 1;
    while (symbols[p] < 0) --p;
    const uint32_t r = merges_.find(symbols[p], symbols[i], &next);
    if (r != MergeTable::kNoRank) push(r, p);
  }
  const size_t k = i + slotLength(symbols[i]);
  if (k < symbols.size()) {
    const uint32_t r = merges_.find(symbols[i], symbols[k], &next);
    if (r != MergeTable::kNoRank) push(r, i);
  }
}

void BpeModel::compactSlots(std::vector<int32_t>& symbols) const {
  size_t w = 0;
  for (size_t i = 0; i < symbols.size(); i += slotLength(symbols[i])) symbols[w++] = symbols[i];
  symbols.resize(w);
}

}  // namespace lg::text
