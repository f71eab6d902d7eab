// The three merge algorithms (array scan, heap, rank buckets) against a plain
// reference written from the definition — repeatedly merge the adjacent pair
// with the lowest rank, leftmost on ties — and against each other on words too
// long for the reference.
#include <random>
#include <unordered_map>

#include <gtest/gtest.h>

#include "text/tokenizer/byte_level.h"
#include "common/utf8.h"
#include "tests/text/tokenizer/test_support.h"

namespace lg::text::testing {
namespace {

using Algorithm = BpeModel::Algorithm;

// The definition, on byte-level strings straight from tokenizer.json.
class ReferenceBpe {
 public:
  ReferenceBpe() {
    const auto& model = v3Json()["model"];
    for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) vocab_[it.key()] = it.value();
    int rank = 0;
    for (const auto& m : model["merges"]) {
      const std::string line = m.get<std::string>();
      ranks_.emplace(line, rank++);
    }
  }
  std::vector<int32_t> encode(std::string_view bytes) const {
    std::vector<std::string> symbols;
    for (char c : bytes) {
      std::string s;
      utf8::append(s, byte_level::byteToChar(static_cast<uint8_t>(c)));
      symbols.push_back(s);
    }
    while (symbols.size() > 1) {
      int best = -1;
      size_t at = 0;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        auto it = ranks_.find(symbols[i] + " " + symbols[i + 1]);
        if (it != ranks_.end() && (best < 0 || it->second < best)) best = it->second, at = i;
      }
      if (best < 0) break;
      symbols[at] += symbols[at + 1];
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    std::vector<int32_t> ids;
    for (const auto& s : symbols) ids.push_back(vocab_.at(s));
    return ids;
  }

 private:
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<std::string, int> ranks_;
};

std::string randomWord(std::mt19937& rng, size_t length) {
  // Letters with a skew towards common English ones, some repeats, some
  // multi-byte characters: long merge chains and many ties.
  static const std::vector<std::string> pieces = {"e", "t", "a", "o", "i", "n", "s", "h", "r", "l", "th", "ing",
                                                  "aa", "é", "中", "文", "😀", "\n", " ", "ab"};
  std::string w;
  while (w.size() < length) w += pieces[rng() % pieces.size()];
  return w;
}

TEST(BpeModel, V3MergesAreMonotone) { EXPECT_TRUE(v3().model().monotone()); }

TEST(BpeModel, AllAlgorithmsMatchTheDefinition) {
  static const ReferenceBpe reference;
  std::mt19937 rng(11);
  for (int n = 0; n < 1500; ++n) {
    const size_t length = 1 + rng() % (n < 1000 ? 40 : 300);
    const std::string word = randomWord(rng, length);
    const std::vector<int32_t> expected = reference.encode(word);
    for (Algorithm a : {Algorithm::kScan, Algorithm::kHeap, Algorithm::kBuckets}) {
      std::vector<int32_t> got;
      v3().model().mergeWith(a, word, got);
      if (a == Algorithm::kScan && word.size() > 48) continue;
      EXPECT_EQ(got, expected) << "algorithm " << static_cast<int>(a) << ", word " << nlohmann::json(word).dump();
    }
  }
}

TEST(BpeModel, HeapAndBucketsAgreeOnLongWords) {
  std::mt19937 rng(12);
  for (size_t length : {5000u, 20000u, 100000u, 300000u}) {
    for (int k = 0; k < 3; ++k) {
      std::string word = randomWord(rng, length);
      if (k == 1) word = std::string(length, 'a');
      if (k == 2) word = std::string(length / 2, ' ') + std::string(length / 2, '\n');
      std::vector<int32_t> heap, buckets;
      v3().model().mergeWith(Algorithm::kHeap, word, heap);
      v3().model().mergeWith(Algorithm::kBuckets, word, buckets);
      EXPECT_EQ(heap, buckets) << "length " << length << " kind " << k;
      std::string back;
      for (int32_t id : buckets) back += v3().tokenBytes(id);
      EXPECT_EQ(back, word);
    }
  }
}

}  // namespace
}  // namespace lg::text::testing
