// A compiled Split pattern: an Oniguruma regex translated to PCRE2 (see
// onig_translate.h), JIT-compiled, iterated the way the reference iterates
// Oniguruma matches.
//
// Thread-safety: a PcreRegex is immutable and shareable; each concurrent
// matcher needs its own MatchScratch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_match_context_8;
struct pcre2_real_jit_stack_8;

namespace lg::text {

// What one request (one encode or encodePrompt) may spend in PCRE2, over all
// its regex calls; docs/tokenizer.md, "Regex budget".
//
// Units: PCRE2's match-limit count (what pcre2_match compares with its match
// limit: backtracking steps and group and iterator entries; the JIT does not
// count every character a scan reads). PCRE2 does not report what a call
// used, so a call runs under a small limit first (16) and, when it hits it,
// again under 4 times that, up to the per-call cap or what is left; each run
// is charged the limit it ran under, an upper bound of what it did (a run
// stopped at its limit did exactly that much). A call that needed u units is
// charged less than max(16, 16u/3), and runs less than 7u/3 units in all
// (the runs stopped at their limits are redone).
//
// CPU: the thread's CPU time since the budget was created, a backstop for the
// work the units do not count (e.g. `\s*\n|\s` over a long run of spaces
// rescans the run on every call for one unit each). Reading a thread's CPU
// clock is a system call (1.6 us in a VM), so every 64 calls the monotonic
// clock (a vDSO read) is compared with the earliest time at which the CPU
// budget could be spent, and only then the CPU clock is read.
class RegexBudget {
 public:
  // `cpu_ns` <= 0: no CPU check.
  RegexBudget(uint64_t units, int64_t cpu_ns);
  uint64_t unitsTotal() const { return total_; }
  uint64_t unitsUsed() const { return total_ - left_; }
  uint64_t calls() const { return calls_; }

 private:
  friend class PcreRegex;
  // Counts a call about to be made; false (see error()) when the budget is
  // spent. Inline: it runs once per regex call.
  bool admitCall() {
    if (left_ == 0) return false;
    ++calls_;
    return cpu_ns_ <= 0 || calls_ % kCpuCheckEvery != 0 || cpuOk();
  }
  static constexpr uint64_t kCpuCheckEvery = 64;
  bool cpuOk();
  Status error() const;
  Status exhausted() const;

  uint64_t total_;
  uint64_t left_;
  uint64_t calls_ = 0;
  int64_t cpu_start_ns_ = 0;
  int64_t cpu_ns_;
  int64_t next_cpu_check_ns_ = 0;  // monotonic clock
  bool cpu_exceeded_ = false;
};

// Per-thread match resources: match data, a match context with limits, a JIT
// stack. Create one per encode call (or reuse from a pool); not thread-safe.
class MatchScratch {
 public:
  MatchScratch();
  ~MatchScratch();
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
  bool ok() const { return match_data_ && context_; }
  // The request's budget for the calls made with this scratch (nullptr: each
  // call only under the per-call limits).
  void setBudget(RegexBudget* budget) { budget_ = budget; }

 private:
  friend class PcreRegex;
  RegexBudget* budget_ = nullptr;
  uint64_t match_limit_ = 0;  // what context_ is set to
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
