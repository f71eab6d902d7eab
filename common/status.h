// Status and Result<T>: error values for code that must not throw.
//
// The request path never throws (see docs/architecture.md, "Errors"): functions
// that can fail return a [[nodiscard]] Status or Result<T>. Exceptions raised by
// third-party libraries (nlohmann/json) are caught at the module edge and
// converted here. A Status carries a code and a human-readable message that
// names the offending field or value; it never carries secrets or prompt text.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace lg {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // the caller's input is malformed or out of range
  kNotFound,           // a named file, tensor, key or field does not exist
  kAlreadyExists,
  kOutOfRange,         // e.g. a context longer than the configured maximum
  kUnimplemented,      // a valid but unsupported feature (names the feature)
  kDataLoss,           // corrupt or truncated stored data
  kResourceExhausted,  // budget, memory or queue limits
  kPermissionDenied,
  kUnauthenticated,
  kUnavailable,
  kInternal,           // a bug: an invariant did not hold
};

std::string_view statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool isOk() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "InvalidArgument: message" (or "OK").
  std::string toString() const;

  // Prefixes the message with context, e.g. "loading tokenizer.json: ".
  Status withContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status notFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status outOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status dataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status resourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status internalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status permissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }

// A value as an error message quotes it: in double quotes, control
// characters as '?', cut after 200 characters ("..."), so that a message
// stays one bounded line whatever a file or request held. Only for values
// that are no secrets (settings, field names, names of things).
std::string quoteValue(std::string_view value);

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).isOk() && "Result constructed from an OK Status");
  }

  bool isOk() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return isOk(); }

  // Precondition: isOk().
  T& value() & { assert(isOk()); return std::get<T>(v_); }
  const T& value() const& { assert(isOk()); return std::get<T>(v_); }
  T&& value() && { assert(isOk()); return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // OK when a value is held.
  Status status() const { return isOk() ? Status() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace lg

// Returns early from the enclosing function when `expr` (a Status) is not OK.
#define LG_RETURN_IF_ERROR(expr)                 \
  do {                                           \
    ::lg::Status lg_status_ = (expr);            \
    if (!lg_status_.isOk()) return lg_status_;   \
  } while (0)

#define LG_CONCAT_INNER_(a, b) a##b
#define LG_CONCAT_(a, b) LG_CONCAT_INNER_(a, b)
#define LG_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.isOk()) return tmp.status();           \
  lhs = std::move(tmp).value()

// `LG_ASSIGN_OR_RETURN(auto x, f());` binds x to f()'s value or returns its Status.
#define LG_ASSIGN_OR_RETURN(lhs, expr) \
  LG_ASSIGN_OR_RETURN_IMPL_(LG_CONCAT_(lg_result_, __LINE__), lhs, expr)
