#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tokenizer/pcre_regex.h"

#include <pcre2.h>
#include <time.h>

#include <algorithm>

#include "text/tokenizer/onig_translate.h"
#include "common/utf8.h"

namespace lg::text {
namespace {

// Backtracking budget per match attempt: far above what the tokenizer patterns
// need on multi-megabyte pieces, low enough to stop a catastrophic pattern.
// Under a RegexBudget a call also stops at what is left of its request's budget.
constexpr uint32_t kMatchLimit = 100'000'000;
constexpr uint32_t kDepthLimit = 10'000'000;
// Under a RegexBudget, the limit a call runs under first, and the growth of
// the limit when a run hits it. The tokenizer patterns need at most 11 units
// per call on ordinary text (measured over mixed text, words, CJK, digits and
// control characters with V2, V3, GPT-2 and Llama-3 style patterns), so
// nearly every call runs once.
constexpr uint64_t kFirstLimit = 16;
constexpr uint64_t kLimitGrowth = 4;
constexpr size_t kJitStackStart = 64 << 10;
constexpr size_t kJitStackMax = 64 << 20;  // reserved address space, committed on use

std::string pcreMessage(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

int64_t clockNs(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return 0;
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

RegexBudget::RegexBudget(uint64_t units, int64_t cpu_ns) : total_(units), left_(units), cpu_ns_(cpu_ns) {
  if (cpu_ns_ > 0) {
    cpu_start_ns_ = clockNs(CLOCK_THREAD_CPUTIME_ID);
    const int64_t now = clockNs(CLOCK_MONOTONIC);
    next_cpu_check_ns_ = now > INT64_MAX - cpu_ns_ ? INT64_MAX : now + cpu_ns_;
  }
}

Status RegexBudget::exhausted() const {
  return resourceExhausted("pre-tokenization exceeded its per-request regex budget of " + std::to_string(total_) +
                           " PCRE2 match-limit units (TokenizerOptions::regex_units_base + regex_units_per_byte x "
                           "input bytes) after " +
                           std::to_string(calls_) + " regex calls");
}

bool RegexBudget::cpuOk() {
  // A thread's CPU time grows no faster than the monotonic clock: until the
  // latter reaches next_cpu_check_ns_ the budget cannot have been spent.
  const int64_t now = clockNs(CLOCK_MONOTONIC);
  if (now < next_cpu_check_ns_) return true;
  const int64_t spent = clockNs(CLOCK_THREAD_CPUTIME_ID) - cpu_start_ns_;
  if (spent > cpu_ns_) {
    cpu_exceeded_ = true;
    return false;
  }
  next_cpu_check_ns_ = now + (cpu_ns_ - spent);
  return true;
}

Status RegexBudget::error() const {
  if (!cpu_exceeded_) return exhausted();
  return resourceExhausted("pre-tokenization exceeded its per-request CPU budget of " +
                           std::to_string(cpu_ns_ / 1'000'000) +
                           " ms (TokenizerOptions::general_path_cpu_ms_base + general_path_cpu_ms_per_mb x input "
                           "megabytes) after " +
                           std::to_string(calls_) + " regex calls");
}

MatchScratch::MatchScratch() {
  match_data_ = pcre2_match_data_create(1, nullptr);
  context_ = pcre2_match_context_create(nullptr);
  jit_stack_ = pcre2_jit_stack_create(kJitStackStart, kJitStackMax, nullptr);
  if (context_) {
    pcre2_set_match_limit(context_, kMatchLimit);
    match_limit_ = kMatchLimit;
    pcre2_set_depth_limit(context_, kDepthLimit);
    if (jit_stack_) pcre2_jit_stack_assign(context_, nullptr, jit_stack_);
  }
}

MatchScratch::~MatchScratch() {
  pcre2_jit_stack_free(jit_stack_);
  pcre2_match_context_free(context_);
  pcre2_match_data_free(match_data_);
}

Result<std::shared_ptr<const PcreRegex>> PcreRegex::compileOniguruma(std::string_view pattern) {
  LG_ASSIGN_OR_RETURN(std::string translated, translateOnigurumaPattern(pattern));
  return compile(std::string(pattern), std::move(translated));
}

Result<std::shared_ptr<const PcreRegex>> PcreRegex::compileLiteral(std::string_view literal) {
  if (auto bad = utf8::firstInvalid(literal)) {
    return invalidArgument("Split string pattern is not valid UTF-8 at byte " + std::to_string(*bad));
  }
  return compile(std::string(literal), literalPattern(literal));
}

Result<std::shared_ptr<const PcreRegex>> PcreRegex::compile(std::string source, std::string translated) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_compile_context* ccontext = pcre2_compile_context_create(nullptr);
  if (!ccontext) return resourceExhausted("PCRE2 compile context allocation failed");
  // Only \n is a newline for Oniguruma. The translation spells ^ and $ out as
  // lookarounds; \Z still follows this setting.
  pcre2_set_newline(ccontext, PCRE2_NEWLINE_LF);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_NO_UTF_CHECK, &error, &error_offset, ccontext);
  pcre2_compile_context_free(ccontext);
  if (!code) {
    return invalidArgument("regex '" + source + "' does not compile: " + pcreMessage(error));
  }
  // JIT is an optimisation: without it (an unsupported CPU) the interpreter
  // gives the same matches under the same limits.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::shared_ptr<PcreRegex> regex(new PcreRegex());
  regex->code_ = code;
  regex->source_ = std::move(source);
  regex->translated_ = std::move(translated);
  return std::shared_ptr<const PcreRegex>(std::move(regex));
}

PcreRegex::~PcreRegex() { pcre2_code_free(code_); }

size_t PcreRegex::charLength(char lead) { return utf8::sequenceLength(static_cast<uint8_t>(lead)); }

Result<bool> PcreRegex::matchAt(std::string_view subject, size_t offset, MatchScratch& scratch, size_t* start,
                                size_t* end) const {
  if (!scratch.ok()) return resourceExhausted("PCRE2 match data allocation failed");
  RegexBudget* budget = scratch.budget_;
  uint64_t limit = kMatchLimit;
  if (budget != nullptr) {
    if (!budget->admitCall()) return budget->error();
    limit = std::min(kFirstLimit, budget->left_);
  }
  int rc = 0;
  while (true) {
    if (limit != scratch.match_limit_) {
      pcre2_set_match_limit(scratch.context_, static_cast<uint32_t>(limit));
      scratch.match_limit_ = limit;
    }
    rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), offset, PCRE2_NO_UTF_CHECK,
                     scratch.match_data_, scratch.context_);
    if (budget == nullptr) break;
    budget->left_ -= limit;  // an upper bound of what this run did
    if (rc != PCRE2_ERROR_MATCHLIMIT || limit >= kMatchLimit) break;
    if (budget->left_ == 0) return budget->exhausted();
    limit = std::min({limit * kLimitGrowth, static_cast<uint64_t>(kMatchLimit), budget->left_});
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    const bool hit_limit = rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
                           rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT ||
                           rc == PCRE2_ERROR_NOMEMORY;
    std::string message = "regex '" + source_ + "' failed on a " + std::to_string(subject.size()) +
                          "-byte piece: " + pcreMessage(rc);
    return hit_limit ? resourceExhausted(std::move(message)) : internalError(std::move(message));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.match_data_);
  *start = ovector[0];
  *end = ovector[1];
  return true;
}

}  // namespace lg::text
