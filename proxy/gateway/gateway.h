// Gateway: the data plane's routes, the OpenAI-compatible endpoints
// (docs/gateway.md, docs/openai-api.md):
//
//   POST   /v1/chat/completions    chat_completions.cc
//   POST   /v1/completions         completions.cc
//   POST   /v1/responses           responses.cc
//   GET    /v1/responses/{id}      stored_responses.cc
//   DELETE /v1/responses/{id}
//   GET    /v1/models, /models     models.cc
//   GET    /v1/models/{id}, /models/{id}
//   POST   /v1/chat/completions/render   render.cc
//   POST   /v1/completions/render
//
// Every route is registered through Admission::forKey (an API key is
// checked before the handler runs), but the render routes, which also take
// the admin key and the metrics token (Admission::forAnyCredential): routers
// call them to learn a request's token ids. Each generation endpoint parses
// its body with the schema layer (proxy/openai/), renders and tokenizes its
// prompt, and hands the result to the one generation call (generation.h),
// which admits, meters, runs and delivers it; the render routes stop after
// the tokens and answer them.
//
// Thread-safety: routes may run on every I/O thread at once; the gateway's
// state is immutable after construction, except the response store (thread-safe).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "billing/key_store.h"
#include "cache/namespace.h"
#include "proxy/gateway/admission.h"
#include "proxy/gateway/generation.h"
#include "proxy/gateway/reply_ids.h"
#include "proxy/gateway/response_store.h"
#include "proxy/gateway/structured_output.h"
#include "proxy/http/blocking_pool.h"
#include "proxy/http/router.h"
#include "proxy/openai/prompt_encoder.h"
#include "proxy/openai/request_types.h"
#include "proxy/openai/responses_request.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::proxy {

struct GatewayOptions {
  std::string model_id;              // what /v1/models lists, responses name and prices use
  std::vector<std::string> aliases;  // other names clients may use (deepseek-chat, ...)
  int32_t max_context = 0;
  openai::ParseLimits limits;
  // Shared cache namespaces each team may read (an admin's grants).
  std::map<std::string, std::vector<cache::SharedNamespace>> shared_namespaces;
};

class Gateway {
 public:
  // Everything must outlive the server; `responses` (null: none are kept,
  // previous_response_id is refused) must also outlive the scheduler's
  // engine thread, which records finished responses.
  Gateway(GatewayOptions options, const Admission& admission, const Generation& generation,
          const text::Tokenizer& tokenizer, const openai::PromptEncoder& encoder,
          const StructuredOutput& structured, ResponseStore* responses);

  void addRoutes(Router& router) const;
  // Where reads of stored responses run (null: inline, as in unit tests);
  // set before the server starts, it must outlive it.
  void setBlockingPool(BlockingPool* pool) { blocking_ = pool; }
  // Where chat replies' generated ids are kept for the next turn (null or
  // disabled: none are); set before the server starts, it must outlive the
  // scheduler's engine thread, which records replies into it.
  void setReplyIds(ReplyIdStore* store) { reply_ids_ = store; }

 private:
  // One file each.
  void chatCompletions(const HttpRequest& request, std::shared_ptr<Exchange> exchange,
                       const billing::Principal& who) const;
  void completions(const HttpRequest& request, std::shared_ptr<Exchange> exchange,
                   const billing::Principal& who) const;
  void responses(const HttpRequest& request, std::shared_ptr<Exchange> exchange, const billing::Principal& who) const;
  // The rest of POST /v1/responses once parsed: on the blocking pool when it
  // reads a stored chain (previous_response_id), else on the I/O thread.
  void continueResponse(const HttpRequest& request, std::shared_ptr<Exchange> exchange, const billing::Principal& who,
                        nlohmann::json body, openai::ParsedResponsesRequest parsed) const;
  void getResponse(const HttpRequest& request, std::shared_ptr<Exchange> exchange,
                   const billing::Principal& who) const;
  void deleteResponse(const HttpRequest& request, std::shared_ptr<Exchange> exchange,
                      const billing::Principal& who) const;
  // The prompt's token ids only: nothing is admitted, charged or run.
  void renderChat(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  void renderCompletions(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  void models(const HttpRequest& request, std::shared_ptr<Exchange> exchange, const billing::Principal& who) const;
  void model(const HttpRequest& request, std::shared_ptr<Exchange> exchange, const billing::Principal& who) const;

  // The stored response a previous_response_id names, or the client's error (stored_responses.cc).
  static bool hasItemReferences(const nlohmann::json& body);
  // truncation "auto": drops the oldest input items (never the instructions
  // or the last item) until the prompt and the requested output fit.
  void truncateToFit(openai::ParsedResponsesRequest& request) const;
  // Replaces each item_reference of `input` with the stored output item it
  // names (the key's own stored responses; ids say where: openai/ids.h).
  std::optional<ApiError> resolveItemReferences(const HttpRequest& request, const billing::Principal& who,
                                                nlohmann::json& input) const;
  openai::ApiResult<StoredConversation> previousResponse(const HttpRequest& request, const billing::Principal& who,
                                                     const std::string& id) const;

  // What the endpoints share (gateway.cc).
  bool knownModel(const std::string& model) const;
  // A scheduler request in the caller's team namespace, with its grants.
  serving::GenerationRequest newRequest(const billing::Principal& who) const;
  // The ledger's fingerprint of the prompt's leading system and developer
  // messages, keyed to the caller's team (billing/prompt_fingerprint.h).
  std::string systemPromptOf(const billing::Principal& who, const openai::ChatPrompt& prompt) const;
  // Adds `n` choices of `request` to the plan; with a seed, choice j samples
  // with seed + j, so that they differ and each is reproducible.
  static void addChoices(GenerationPlan& plan, serving::GenerationRequest request, int32_t n);
  // Runs the plan with every choice constrained by `reply`: at once when its
  // grammar is ready, else compiled first on the blocking pool (in the
  // caller's share of it: compiling a new schema can take a tenth of a
  // second, which no I/O thread may spend), or inline without a pool.
  void runConstrained(std::shared_ptr<Exchange> exchange, const billing::Principal& who, GenerationPlan plan,
                      ReplyConstraint reply) const;
  // A plan with the fields every endpoint sets the same way.
  GenerationPlan newPlan(std::string response_id, std::string requested_model, bool stream,
                         const std::vector<std::string>& ignored, const std::vector<std::string>& hosted_tools) const;

  const GatewayOptions options_;
  const Admission& admission_;
  const Generation& generation_;
  const text::Tokenizer& tokenizer_;
  const openai::TokenLengths token_lengths_;  // the prompt layout in tokens
  const openai::PromptEncoder& encoder_;
  const StructuredOutput& structured_;
  ResponseStore* const responses_;
  BlockingPool* blocking_ = nullptr;
  ReplyIdStore* reply_ids_ = nullptr;
};

}  // namespace lg::proxy
