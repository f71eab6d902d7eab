// The general pre-tokenizer: a pipeline of the `tokenizers` pre-tokenizers
// LatentGate supports (Split with any regex or string pattern, behaviour and
// invert; Digits; a final ByteLevel with add_prefix_space and use_regex),
// reproducing the library's splitting rules exactly, in one streaming pass
// (no per-step piece lists, so multi-megabyte inputs stay cheap in memory).
//
// Thread-safety: immutable after construction; run() may be called
// concurrently with distinct scratch objects.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/status.h"
#include "text/tokenizer/pcre_regex.h"

namespace lg::text {

// SplitDelimiterBehavior of `tokenizers`.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kDigits, kByteLevel };
  Kind kind = Kind::kSplit;
  std::shared_ptr<const PcreRegex> regex;  // kSplit; kByteLevel when use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool individual_digits = false;  // kDigits
  bool add_prefix_space = false;   // kByteLevel
};

// A non-owning reference to a callable `Status(std::string_view)`: the
// pipeline calls it once per piece, so it must not allocate as std::function
// may.
class PieceCallback {
 public:
  template <typename F>
    requires(!std::is_same_v<std::remove_cv_t<F>, PieceCallback>)
  PieceCallback(F& f)  // NOLINT(google-explicit-constructor)
      : object_(&f), call_([](void* o, std::string_view piece) { return (*static_cast<F*>(o))(piece); }) {}
  Status operator()(std::string_view piece) const { return call_(object_, piece); }

 private:
  void* object_;
  Status (*call_)(void*, std::string_view);
};

// Scratch state of one run: regex match resources and storage for pieces that
// ByteLevel's add_prefix_space rewrites.
struct PreTokenizeScratch {
  MatchScratch match;
  std::deque<std::string> owned;
};

class PreTokenizerPipeline {
 public:
  using Sink = PieceCallback;

  // `steps` must end with exactly one kByteLevel step (checked at load).
  explicit PreTokenizerPipeline(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}

  // Calls sink(piece) for every pre-token of `text` in order. A piece views
  // `text` or scratch.owned and is valid until run() returns.
  Status run(std::string_view text, PreTokenizeScratch& scratch, const Sink& sink) const;

  const std::vector<PreTokenizerStep>& steps() const { return steps_; }

 private:
  Status runStep(size_t index, std::string_view piece, PreTokenizeScratch& scratch, const Sink& sink) const;
  std::vector<PreTokenizerStep> steps_;
};

}  // namespace lg::text
