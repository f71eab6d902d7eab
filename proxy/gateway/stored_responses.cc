// Stored responses by id: GET and DELETE /v1/responses/{id}, and the record a
// previous_response_id names (response_store.h). Another key's response is
// answered exactly as an unknown id. With replicas, an id this replica does
// not hold but another does is refused as misdirected (421
// response_on_other_replica), the same answer on every replica that does not
// hold it; while the index cannot be read, 503.
#include <optional>

#include <nlohmann/json.hpp>

#include "proxy/gateway/gateway.h"
#include "proxy/http/http_errors.h"
#include "proxy/http/proxy_log.h"
#include "proxy/openai/ids.h"

namespace lg::proxy {
namespace {

ApiError responseNotFound(std::string_view id) {
  ApiError e = openai::invalidRequest("", "", "Response with id '" + std::string(id) + "' not found.");
  e.http_status = 404;
  return e;
}

std::string idOf(const HttpRequest& request) { return request.path.substr(std::string_view("/v1/responses/").size()); }

// For an id this replica does not hold: the error when another replica holds
// it (or the index cannot tell), nothing when no replica does (the caller's
// own "not found").
std::optional<ApiError> heldElsewhereError(const ResponseStore& store, const HttpRequest& request,
                                           std::string_view owner, std::string_view id, std::string param) {
  auto holder = store.heldElsewhere(owner, id);
  if (!holder.isOk()) {
    proxyLog()->warn("request {}: the stored responses' index cannot be read: {}", request.id,
                     holder.status().toString());
    ApiError e{503, "server_error", "stored_responses_index_unavailable", std::move(param),
               "This replica does not hold response '" + std::string(id) +
                   "', and cannot tell now whether another replica of this gateway does. Retry shortly."};
    e.retry_after_s = 5;
    return e;
  }
  if (!*holder) return std::nullopt;
  ApiError e = openai::invalidRequest(
      std::move(param), "response_on_other_replica",
      "Response with id '" + std::string(id) +
          "' is stored by another replica of this gateway: stored responses stay on the replica that made them. "
          "Send this request to that replica (route a key's Responses requests to one replica), or send the whole "
          "conversation in `input`.");
  e.http_status = 421;
  return e;
}

// GET /v1/responses/{id}'s query: OpenAI's retrieve takes stream,
// starting_after, include and include_obfuscation. The stored object is
// returned as it was made, whole and not streamed, so only the values that
// ask for exactly that pass; anything else is a 400 naming it.
std::optional<ApiError> checkRetrieveQuery(const HttpRequest& request) {
  std::string_view query = request.query;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    const std::string key = percentDecode(pair.substr(0, eq), true).substr(0, 64);
    const std::string value = eq == std::string_view::npos ? "" : percentDecode(pair.substr(eq + 1), true);
    if (key == "include_obfuscation") continue;  // only streams are obfuscated, and none is sent
    if (key == "stream" && value == "false") continue;
    if (key == "stream" || key == "starting_after") {
      return openai::invalidRequest(key, "unsupported_parameter",
                                    "a stored response is returned whole; replaying it as a stream is not supported");
    }
    if (key == "include" || key == "include[]") {
      return openai::invalidRequest("include", "unsupported_parameter",
                                    "a stored response is returned as it was made; send include with the request "
                                    "that creates it");
    }
    return openai::invalidRequest(key, "unknown_parameter", "Unrecognized request argument supplied: " + key);
  }
  return std::nullopt;
}

}  // namespace

bool Gateway::hasItemReferences(const nlohmann::json& body) {
  const auto input = body.find("input");
  if (input == body.end() || !input->is_array()) return false;
  for (const nlohmann::json& item : *input) {
    if (item.is_object() && item.value("type", "") == "item_reference") return true;
  }
  return false;
}

std::optional<ApiError> Gateway::resolveItemReferences(const HttpRequest& request, const billing::Principal& who,
                                                       nlohmann::json& input) const {
  for (size_t i = 0; i < input.size(); ++i) {
    nlohmann::json& item = input[i];
    if (!item.is_object() || item.value("type", "") != "item_reference") continue;
    const std::string param = "input[" + std::to_string(i) + "].id";
    const auto id = item.find("id");
    if (id == item.end() || !id->is_string()) {
      return openai::invalidRequest(param, "invalid_value", param + " must be the id of a stored output item");
    }
    const std::string item_id = id->get<std::string>();
    auto notFound = [&] {
      return openai::invalidRequest(param, "item_not_found", "Item with id '" + item_id + "' not found.");
    };
    const std::optional<openai::OutputItemRef> where = openai::parseOutputItemId(item_id);
    if (!where) return notFound();
    // Another key's response reads as missing: the same answer as an unknown id.
    auto found = responses_->get(who.key_id, where->response_id);
    if (!found.isOk()) {
      proxyLog()->error("request {}: reading a stored response failed: {}", request.id, found.status().toString());
      return openai::internalError();
    }
    if (!*found) {
      if (auto e = heldElsewhereError(*responses_, request, who.key_id, where->response_id, param)) return e;
      return notFound();
    }
    const nlohmann::json& output = (*found)->response["output"];
    if (!output.is_array() || where->output_index >= output.size() ||
        output[where->output_index].value("id", "") != item_id) {
      return notFound();
    }
    item = output[where->output_index];
  }
  return std::nullopt;
}

openai::ApiResult<StoredConversation> Gateway::previousResponse(const HttpRequest& request, const billing::Principal& who,
                                                            const std::string& id) const {
  if (responses_ == nullptr) {
    // No store: say so rather than answer without the context.
    return openai::invalidRequest("previous_response_id", "previous_response_not_found",
                                  "Stored responses are not kept by this server; send the whole conversation in "
                                  "`input`.");
  }
  // The chain walked (at most max_chain_depth point reads): an expired or
  // purged ancestor is the same clear 400 as a missing id.
  auto previous = responses_->conversation(who.key_id, id);
  if (!previous.isOk()) {
    proxyLog()->error("request {}: reading a stored response failed: {}", request.id, previous.status().toString());
    return openai::internalError();
  }
  if (!*previous) {
    if (auto e = heldElsewhereError(*responses_, request, who.key_id, id, "previous_response_id")) return *e;
    // As OpenAI answers (400); another key's response is answered the same way.
    return openai::invalidRequest("previous_response_id", "previous_response_not_found",
                                  "Previous response with id '" + id + "' not found.");
  }
  return std::move(**previous);
}

void Gateway::getResponse(const HttpRequest& request, std::shared_ptr<Exchange> exchange,
                          const billing::Principal& who) const {
  const std::string id = idOf(request);
  // /v1/responses/{id}/input_items is not served: the URL's own 404, not
  // "response not found" for an id with a slash in it.
  if (id.find('/') != std::string::npos) return respondWithApiError(*exchange, unknownUrlError(request.method, request.path));
  if (auto e = checkRetrieveQuery(request)) return respondWithApiError(*exchange, *e);
  if (responses_ == nullptr) return respondWithApiError(*exchange, responseNotFound(id));
  auto found = responses_->get(who.key_id, id);
  if (!found.isOk()) {
    proxyLog()->error("request {}: reading a stored response failed: {}", request.id, found.status().toString());
    return respondWithApiError(*exchange, openai::internalError());
  }
  if (!*found) {
    if (auto e = heldElsewhereError(*responses_, request, who.key_id, id, "")) return respondWithApiError(*exchange, *e);
    return respondWithApiError(*exchange, responseNotFound(id));
  }
  exchange->respond(200, jsonHeaders(),
                    (*found)->response.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void Gateway::deleteResponse(const HttpRequest& request, std::shared_ptr<Exchange> exchange,
                             const billing::Principal& who) const {
  const std::string id = idOf(request);
  if (id.find('/') != std::string::npos) return respondWithApiError(*exchange, unknownUrlError(request.method, request.path));
  if (responses_ == nullptr) return respondWithApiError(*exchange, responseNotFound(id));
  // A synced write (on the blocking pool): a deleted response must stay
  // deleted after a crash.
  auto removed = responses_->remove(who.key_id, id);
  if (!removed.isOk()) {
    proxyLog()->error("request {}: deleting a stored response failed: {}", request.id, removed.status().toString());
    return respondWithApiError(*exchange, openai::internalError());
  }
  if (!*removed) {
    // Only the replica that holds a record deletes it.
    if (auto e = heldElsewhereError(*responses_, request, who.key_id, id, "")) return respondWithApiError(*exchange, *e);
    return respondWithApiError(*exchange, responseNotFound(id));
  }
  exchange->respond(200, jsonHeaders(), nlohmann::json{{"id", id}, {"object", "response"}, {"deleted", true}}.dump());
}

}  // namespace lg::proxy
