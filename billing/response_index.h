// ResponseIndex: which replica holds a stored response, when replicas share
// PostgreSQL (docs/billing.md, "The control plane"; the records themselves,
// proxy/gateway/response_store.h, stay in the billing store of the replica
// that made them).
//
// The holder writes a marker with each change of one of its records, in the
// same batch as the record (respidx/<owner>/<response id>/<unique>: its expiry
// and whether it is deleted); the index pushes the markers into PostgreSQL
// and forgets them once committed. Another replica that does not hold an id
// asks holder(): the same answer wherever the request lands, so a response
// is found on its replica and refused, as held elsewhere, on the others,
// rather than "not found" on some and found on one. Deletion is final: a
// deleted response never becomes live again in the index, whatever order
// markers arrive in.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace lg::billing {

inline constexpr std::string_view kResponseIndexMarkers = "respidx/";

// A marker's key; unique per call in this process (a counter started from
// the clock), so a marker written while an older one of the same response
// is being pushed is never lost with it.
std::string responseIndexMarkerKey(std::string_view owner, std::string_view response_id);
// A marker's value: {"expires": <Unix seconds>, "deleted": <bool>}.
std::string responseIndexMarkerValue(int64_t expires_s, bool deleted);

struct ResponseIndexMarker {
  std::string owner;        // the API key id
  std::string response_id;
  int64_t expires_s = 0;
  bool deleted = false;
};
// The marker of `key` and `value`, or nothing when either is damaged.
std::optional<ResponseIndexMarker> parseResponseIndexMarker(std::string_view key, std::string_view value);

class ResponseIndex {
 public:
  virtual ~ResponseIndex() = default;
  // This replica's id: the holder recorded for its own records.
  virtual const std::string& replica() const = 0;
  // Markers were written: push them soon (not on the caller's thread).
  virtual void marked() = 0;
  // The replica that holds `owner`'s live (unexpired, not deleted) record
  // `response_id`, as far as PostgreSQL knows; nothing when none does.
  // Unavailable: PostgreSQL cannot be asked now. Blocks on a query: call it
  // on the blocking pool.
  virtual Result<std::optional<std::string>> holder(std::string_view owner, std::string_view response_id) = 0;
};

}  // namespace lg::billing
