// TokenConstraint: what a constrained request's output may be, as the
// scheduler sees it: before each sampled token, the set of tokens that may
// come next (a bitmask over the vocabulary), then the token that came. The
// grammar engine (text/grammar/) implements it; the scheduler knows nothing
// of grammars, schemas or JSON.
//
// End of output: the model's end-of-sequence tokens are not part of the
// vocabulary a constraint sees. The scheduler allows them only when
// canEnd(), and ends the output itself (finish_reason "stop") when
// mustEnd(): nothing may follow.
//
// Not thread-safe: one per sequence, used on the engine thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

namespace lg::serving {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets bit t (word t / 32, bit t % 32) for every token t that may come
  // next, clears the others.
  virtual void fillAllowed(std::span<uint32_t> bitmask) = 0;
  // The token that was sampled; false: it was not allowed (the state is
  // unchanged).
  virtual bool accept(int32_t token) = 0;
  // The output so far is complete: it may end here.
  virtual bool canEnd() const = 0;
  // It is complete and nothing may follow.
  virtual bool mustEnd() const = 0;
};

// Makes each sequence's constraint (a request with n choices makes n).
using TokenConstraintFactory = std::function<std::unique_ptr<TokenConstraint>()>;

}  // namespace lg::serving
