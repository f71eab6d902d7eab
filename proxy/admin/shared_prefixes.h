// POST /admin/shared-prefixes: an admin publishes a prompt prefix into a
// shared cache namespace (cache/namespace.h), so that the teams granted it
// (cache.shared_namespaces, docs/configuration.md) hit on it, from their
// first request on, without ever reading each other's prefixes.
//
//   {"namespace": "company", "messages": [...]}          a chat conversation, rendered as /v1/chat/completions renders it
//   {"namespace": "company", "prompt": "..." | [ids]}    one prompt, encoded as /v1/completions encodes it
//   -> 200 {"object": "shared_prefix", "namespace", "prompt_tokens", "cached_tokens"}
//
// The prompt is prefilled (one token generated, discarded) through the
// generation call (proxy/gateway/generation.h, runAsAdmin: the admin's work
// is neither rate limited nor billed) in a team namespace of its own, random
// and used by no key, and its cached blocks are then published into the
// shared namespace (PrefixCache::publishToNamespace: the same blocks, no
// copy). Only whole blocks are cached, so cached_tokens
// is the prompt rounded down to cache blocks, and a prompt shorter than one
// block is refused. A published prefix is evicted like any cached one; the
// admin publishes it again after a restart that lost it.
//
// Thread-safety: the route runs on any I/O thread, the publication on the
// engine thread; the publisher's state is immutable.
#pragma once

#include <string>
#include <vector>

#include "cache/namespace.h"
#include "cache/prefix_cache.h"
#include "proxy/gateway/admission.h"
#include "proxy/gateway/generation.h"
#include "proxy/http/router.h"
#include "proxy/openai/prompt_encoder.h"
#include "proxy/openai/request_types.h"

namespace lg::proxy {

struct SharedPrefixOptions {
  std::string model_id;     // the endpoints' parsers want a `model`; the admin need not send one
  int32_t block_tokens = 0;  // the cache's block
  openai::ParseLimits limits;
  std::vector<cache::SharedNamespace> namespaces;  // those configured; publishing elsewhere is refused
};

class SharedPrefixPublisher {
 public:
  // Everything passed by reference must outlive the publisher, the server
  // and the scheduler's last event.
  SharedPrefixPublisher(SharedPrefixOptions options, const Generation& generation, cache::PrefixCache& cache,
                        const openai::PromptEncoder& encoder, const Admission& admission);

  void addRoutes(Router& router) const;

 private:
  void publish(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;

  const SharedPrefixOptions options_;
  const Generation& generation_;
  cache::PrefixCache& cache_;
  const openai::PromptEncoder& encoder_;
  const Admission& admission_;
};

}  // namespace lg::proxy
