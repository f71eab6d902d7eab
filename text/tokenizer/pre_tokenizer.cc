#include "text/tokenizer/pre_tokenizer.h"

#include "text/tokenizer/unicode_data.h"
#include "common/utf8.h"

namespace lg::text {
namespace {

// Applies a SplitDelimiterBehavior to the stream of (span, is_match) elements
// that a pattern produces over a piece, as NormalizedString::split does on the
// complete list, then drops empty results as PreTokenizedString::split does.
// Every behaviour needs at most one element of look-behind, so elements are
// handled as they come.
class BehaviorFolder {
 public:
  BehaviorFolder(SplitBehavior behavior, std::string_view piece,
                 PieceCallback out)
      : behavior_(behavior), piece_(piece), out_(out) {}

  Status add(size_t start, size_t end, bool is_match) {
    switch (behavior_) {
      case SplitBehavior::kIsolated:
        return emit(start, end);
      case SplitBehavior::kRemoved:
        return is_match ? Status::ok() : emit(start, end);
      case SplitBehavior::kContiguous:
        // Consecutive elements with the same flag fuse.
        if (pending_ && is_match == previous_match_) {
          pending_end_ = end;
        } else {
          LG_RETURN_IF_ERROR(flush());
          hold(start, end, is_match);
        }
        previous_match_ = is_match;
        return Status::ok();
      case SplitBehavior::kMergedWithPrevious:
        // A match fuses into the element before it, unless that was a match.
        if (is_match && !previous_match_ && pending_) {
          pending_end_ = end;
        } else {
          LG_RETURN_IF_ERROR(flush());
          hold(start, end, is_match);
        }
        previous_match_ = is_match;
        return Status::ok();
      case SplitBehavior::kMergedWithNext:
        // The library folds from the right: a match fuses with the element
        // after it when that one is not a match.
        if (pending_ && pending_match_ && !is_match) {
          const size_t begin = pending_start_;
          pending_ = false;
          return emit(begin, end);
        }
        LG_RETURN_IF_ERROR(flush());
        hold(start, end, is_match);
        return Status::ok();
    }
    return Status::ok();
  }

  Status finish() { return flush(); }

 private:
  void hold(size_t start, size_t end, bool is_match) {
    pending_ = true;
    pending_start_ = start;
    pending_end_ = end;
    pending_match_ = is_match;
  }
  Status flush() {
    if (!pending_) return Status::ok();
    pending_ = false;
    return emit(pending_start_, pending_end_);
  }
  Status emit(size_t start, size_t end) {
    if (start == end) return Status::ok();
    return out_(piece_.substr(start, end - start));
  }

  SplitBehavior behavior_;
  std::string_view piece_;
  PieceCallback out_;
  bool pending_ = false;
  size_t pending_start_ = 0;
  size_t pending_end_ = 0;
  bool pending_match_ = false;
  bool previous_match_ = false;
};

// Feeds the elements of Pattern::find_matches for a regex: the gaps and the
// matches, covering the piece.
Status regexElements(const PcreRegex& regex, std::string_view piece, bool invert, MatchScratch& scratch,
                     BehaviorFolder& folder) {
  size_t previous = 0;
  const Status status = regex.forEachMatch(piece, scratch, [&](size_t start, size_t end) -> Status {
    if (previous != start) {
      const Status gap = folder.add(previous, start, invert);
      if (!gap.isOk()) return gap;
    }
    previous = end;
    return folder.add(start, end, !invert);
  });
  LG_RETURN_IF_ERROR(status);
  if (previous != piece.size()) LG_RETURN_IF_ERROR(folder.add(previous, piece.size(), invert));
  return folder.finish();
}

}  // namespace

Status PreTokenizerPipeline::run(std::string_view text, PreTokenizeScratch& scratch, const Sink& sink) const {
  if (text.empty()) return Status::ok();
  return runStep(0, text, scratch, sink);
}

Status PreTokenizerPipeline::runStep(size_t index, std::string_view piece, PreTokenizeScratch& scratch,
                                     const Sink& sink) const {
  if (index == steps_.size()) return sink(piece);
  const PreTokenizerStep& step = steps_[index];
  auto next_fn = [&](std::string_view sub) { return runStep(index + 1, sub, scratch, sink); };
  const PieceCallback next(next_fn);
  switch (step.kind) {
    case PreTokenizerStep::Kind::kSplit: {
      BehaviorFolder folder(step.behavior, piece, next);
      return regexElements(*step.regex, piece, step.invert, scratch.match, folder);
    }
    case PreTokenizerStep::Kind::kDigits: {
      // Pattern for a char predicate: each numeric character is a match.
      BehaviorFolder folder(step.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, piece,
                            next);
      size_t previous = 0;
      for (size_t i = 0; i < piece.size();) {
        size_t len = 0;
        const char32_t cp = utf8::decode(piece.data() + i, &len);
        if (unicode::isRustNumeric(cp)) {
          if (previous < i) LG_RETURN_IF_ERROR(folder.add(previous, i, false));
          LG_RETURN_IF_ERROR(folder.add(i, i + len, true));
          previous = i + len;
        }
        i += len;
      }
      if (previous < piece.size()) LG_RETURN_IF_ERROR(folder.add(previous, piece.size(), false));
      return folder.finish();
    }
    case PreTokenizerStep::Kind::kByteLevel: {
      std::string_view current = piece;
      if (step.add_prefix_space && piece.front() != ' ') {
        std::string& owned = scratch.owned.emplace_back();
        owned.reserve(piece.size() + 1);
        owned.push_back(' ');
        owned.append(piece);
        current = owned;
      }
      if (!step.regex) return next(current);
      BehaviorFolder folder(SplitBehavior::kIsolated, current, next);
      return regexElements(*step.regex, current, /*invert=*/false, scratch.match, folder);
    }
  }
  return Status::ok();
}

}  // namespace lg::text
