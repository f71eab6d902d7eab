// Byte-level BPE over raw bytes and token ids, merging exactly as the
// `tokenizers` BPE model (no dropout): repeatedly merge the adjacent pair with
// the lowest merge rank, the leftmost one on ties.
//
// Short words use a small array scan, long ones a binary heap with lazy
// deletion (O(n log n)). Huge words (multi-megabyte pre-tokens), when the merge
// table is "monotone" (every merge ranks after the merges that build its parts,
// true of trained tables such as DeepSeek's), go rank by rank through buckets:
// the same merges in the same order, but cache-friendly, at about 16 bytes of
// scratch per input byte.
//
// Thread-safety: immutable after build(); encodeWord() may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "text/tokenizer/word_cache.h"

namespace lg::text {

// Open-addressing map (left id, right id) -> (rank, merged id).
class MergeTable {
 public:
  static constexpr uint32_t kNoRank = UINT32_MAX;

  void reserve(size_t merges);
  // A later insert of the same pair replaces the earlier one, as the
  // library's HashMap collect does.
  void insert(int32_t left, int32_t right, uint32_t rank, int32_t merged);
  // Rank of the pair, or kNoRank; stores the merged id.
  uint32_t find(int32_t left, int32_t right, int32_t* merged) const {
    const uint64_t key = pack(left, right);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Entry& e = entries_[i];
      if (e.key == key) {
        *merged = e.merged;
        return e.rank;
      }
      if (e.key == kEmpty) return kNoRank;
    }
  }
  size_t size() const { return size_; }

  template <typename F>
  void forEach(F&& f) const {
    for (const Entry& e : entries_) {
      if (e.key != kEmpty) f(static_cast<int32_t>(e.key >> 32), static_cast<int32_t>(e.key & 0xffffffff), e.rank, e.merged);
    }
  }

 private:
  struct Entry {
    uint64_t key;
    uint32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t pack(int32_t l, int32_t r) {
    return (uint64_t{static_cast<uint32_t>(l)} << 32) | static_cast<uint32_t>(r);
  }
  size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9e3779b97f4a7c15ull) >> shift_); }

  std::vector<Entry> entries_;
  size_t mask_ = 0;
  unsigned shift_ = 64;
  size_t size_ = 0;
};

struct BpeVocabEntry {
  std::string bytes;  // raw bytes (byte-level decoded); empty if the token is not byte-level
  int32_t id = 0;
};

class BpeModel {
 public:
  // `byte_ids[b]` is the id of the one-byte token for byte b, or -1 if the
  // vocabulary lacks it (the library then drops that byte). `token_bytes[id]`
  // holds the raw bytes of every byte-level token (for lengths and for
  // ignore_merges).
  BpeModel(const int32_t (&byte_ids)[256], MergeTable merges, std::vector<std::string> token_bytes,
           bool ignore_merges);

  // Appends the ids of one pre-token (raw bytes, non-empty). `scratch` is the
  // caller's working buffer (reused across calls, one per thread).
  void encodeWord(std::string_view word, std::vector<int32_t>& out, std::vector<int32_t>& scratch) const;

  const MergeTable& merges() const { return merges_; }
  bool monotone() const { return monotone_; }

  // Testing: merge with one algorithm regardless of size (kBuckets needs a
  // monotone table), no cache.
  enum class Algorithm { kScan, kHeap, kBuckets };
  void mergeWith(Algorithm algorithm, std::string_view word, std::vector<int32_t>& out) const;

 private:
  void mergeSmall(std::vector<int32_t>& symbols) const;
  void mergeLarge(std::vector<int32_t>& symbols) const;
  void mergeHuge(std::vector<int32_t>& symbols) const;
  // The slot layout of mergeLarge and mergeHuge (see mergeLarge): a symbol sits
  // at the index of its first byte, absorbed slots hold -1.
  size_t slotLength(int32_t id) const { return token_length_[static_cast<size_t>(id)]; }
  // Merges slot i with its successor at j into `merged` and offers the pairs it
  // now forms with its neighbours to push(rank, index).
  template <typename Push>
  void mergeSlots(std::vector<int32_t>& symbols, size_t i, size_t j, int32_t merged, Push&& push) const;
  // Drops the absorbed slots.
  void compactSlots(std::vector<int32_t>& symbols) const;

  int32_t byte_ids_[256];
  MergeTable merges_;
  std::vector<uint32_t> token_length_;  // bytes per id
  bool ignore_merges_;
  bool monotone_ = false;
  uint32_t rank_count_ = 0;  // one more than the largest rank
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> by_bytes_;  // only with ignore_merges
  WordCache cache_;
};

}  // namespace lg::text
