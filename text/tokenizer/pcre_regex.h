// A compiled Split pattern: an Oniguruma regex translated to PCRE2 (see
// onig_translate.h), JIT-compiled, iterated the way the reference iterates
// Oniguruma matches.
//
// Thread-safety: a PcreRegex is immutable and shareable; each concurrent
// matcher needs its own MatchScratch.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_match_context_8;
struct pcre2_real_jit_stack_8;

namespace lg::text {

// Per-thread match resources: match data, a match context with limits, a JIT
// stack. Create one per encode call (or reuse from a pool); not thread-safe.
class MatchScratch {
 public:
  MatchScratch();
  ~MatchScratch();
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
  bool ok() const { return match_data_ && context_; }

 private:
  friend class PcreRegex;
  pcre2_real_match_data_8* match_data_ = nullptr;
  pcre2_real_match_context_8* context_ = nullptr;
  pcre2_real_jit_stack_8* jit_stack_ = nullptr;
};

class PcreRegex {
 public:
  // `source` names the pattern in error messages (the Oniguruma text).
  static Result<std::shared_ptr<const PcreRegex>> compileOniguruma(std::string_view pattern);
  static Result<std::shared_ptr<const PcreRegex>> compileLiteral(std::string_view literal);
  ~PcreRegex();
  PcreRegex(const PcreRegex&) = delete;
  PcreRegex& operator=(const PcreRegex&) = delete;

  // Calls emit(start, end) for each match in `subject` (valid UTF-8), in the
  // order and with the empty-match rule of the onig crate's find_iter: search
  // from the end of the previous match; an empty match right where the
  // previous match ended is skipped by advancing one character.
  template <typename Emit>
  Status forEachMatch(std::string_view subject, MatchScratch& scratch, Emit&& emit) const {
    size_t last_end = 0;
    bool have_last = false;
    size_t last_match_end = 0;
    while (last_end <= subject.size()) {
      size_t start = 0, end = 0;
      LG_ASSIGN_OR_RETURN(bool found, matchAt(subject, last_end, scratch, &start, &end));
      if (!found) break;
      if (start == end && have_last && last_match_end == end) {
        last_end += last_end < subject.size() ? charLength(subject[last_end]) : 1;
        continue;
      }
      last_end = end;
      have_last = true;
      last_match_end = end;
      LG_RETURN_IF_ERROR(emit(start, end));
    }
    return Status::ok();
  }

  const std::string& source() const { return source_; }
  const std::string& translated() const { return translated_; }

 private:
  PcreRegex() = default;
  static Result<std::shared_ptr<const PcreRegex>> compile(std::string source, std::string translated);
  Result<bool> matchAt(std::string_view subject, size_t offset, MatchScratch& scratch, size_t* start,
                       size_t* end) const;
  static size_t charLength(char lead);

  pcre2_real_code_8* code_ = nullptr;
  std::string source_;
  std::string translated_;
};

}  // namespace lg::text
