#include "proxy/gateway/gateway.h"

#include <utility>

#include "common/team_id.h"
#include "proxy/http/http_errors.h"

namespace lg::proxy {
namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string_view roleName(openai::Role role) { return role == openai::Role::kSystem ? "system" : "developer"; }

}  // namespace

Gateway::Gateway(GatewayOptions options, const Admission& admission, const Generation& generation,
                 const text::Tokenizer& tokenizer, const openai::PromptEncoder& encoder,
                 const StructuredOutput& structured, ResponseStore* responses)
    : options_(std::move(options)),
      admission_(admission),
      generation_(generation),
      tokenizer_(tokenizer),
      token_lengths_(tokenizer),
      encoder_(encoder),
      structured_(structured),
      responses_(responses) {}

void Gateway::addRoutes(Router& router) const {
  auto route = [this](auto method) {
    return admission_.forKey([this, method](const HttpRequest& r, std::shared_ptr<Exchange> e,
                                            const billing::Principal& who) { (this->*method)(r, std::move(e), who); });
  };
  // Prompts: the large body limit (server.max_body_bytes); every other route
  // takes small bodies (Router::BodySize).
  router.add("POST", "/v1/chat/completions", route(&Gateway::chatCompletions), Runs::kOnIoThread, BodySize::kLarge);
  router.add("POST", "/v1/completions", route(&Gateway::completions), Runs::kOnIoThread, BodySize::kLarge);
  router.add("POST", "/v1/responses", route(&Gateway::responses), Runs::kOnIoThread, BodySize::kLarge);
  // The render routes take the prompts the generation routes take: the same body limit.
  auto render = [this](auto method) {
    return admission_.forAnyCredential(
        [this, method](const HttpRequest& r, std::shared_ptr<Exchange> e) { (this->*method)(r, std::move(e)); });
  };
  router.add("POST", "/v1/chat/completions/render", render(&Gateway::renderChat), Runs::kOnIoThread,
             BodySize::kLarge);
  router.add("POST", "/v1/completions/render", render(&Gateway::renderCompletions), Runs::kOnIoThread,
             BodySize::kLarge);
  router.addPrefix("GET", "/v1/responses/", route(&Gateway::getResponse), Runs::kBlocking);  // a read and a parse
  router.addPrefix("DELETE", "/v1/responses/", route(&Gateway::deleteResponse), Runs::kBlocking);  // a synced delete
  router.add("GET", "/v1/models", route(&Gateway::models));
  router.add("GET", "/models", route(&Gateway::models));
  router.addPrefix("GET", "/v1/models/", route(&Gateway::model));
  router.addPrefix("GET", "/models/", route(&Gateway::model));
}

bool Gateway::knownModel(const std::string& model) const {
  if (model == options_.model_id) return true;
  for (const std::string& a : options_.aliases) {
    if (model == a) return true;
  }
  return false;
}

serving::GenerationRequest Gateway::newRequest(const billing::Principal& who) const {
  // Key teams were validated when the key was created.
  serving::GenerationRequest r(cache::TeamNamespace::ofTeam(who.team, who.team_generation).value());
  if (auto it = options_.shared_namespaces.find(who.team); it != options_.shared_namespaces.end()) r.shared = it->second;
  return r;
}

std::string Gateway::systemPromptOf(const billing::Principal& who, const openai::ChatPrompt& prompt) const {
  std::vector<std::pair<std::string_view, std::string_view>> parts;
  for (const openai::ChatMessage& m : prompt.messages) {
    if (m.role != openai::Role::kSystem && m.role != openai::Role::kDeveloper) break;
    parts.emplace_back(roleName(m.role), m.content ? std::string_view(*m.content) : std::string_view());
  }
  // The team's scope, generation included: an id reused after a deletion
  // cannot match the earlier owner's fingerprints either.
  return admission_.metering().systemPromptFingerprint(teamScope(who.team, who.team_generation), parts);
}

void Gateway::addChoices(GenerationPlan& plan, serving::GenerationRequest request, int32_t n) {
  for (int32_t j = 0; j < n; ++j) {
    serving::GenerationRequest choice(request.ns);
    if (j + 1 < n) {
      choice = request;
    } else {
      choice = std::move(request);
    }
    if (choice.sampling.seed) choice.sampling.seed = *choice.sampling.seed + static_cast<uint64_t>(j);
    plan.choices.push_back(std::move(choice));
  }
}

void Gateway::runConstrained(std::shared_ptr<Exchange> exchange, const billing::Principal& who, GenerationPlan plan,
                             ReplyConstraint reply) const {
  const auto run = [this](std::shared_ptr<Exchange> to, const billing::Principal& caller, GenerationPlan constrained,
                          const serving::TokenConstraintFactory& constraint) {
    for (serving::GenerationRequest& choice : constrained.choices) choice.sampling.constraint = constraint;
    generation_.run(std::move(to), caller, std::move(constrained));
  };
  if (std::optional<serving::TokenConstraintFactory> ready = structured_.ready(reply)) {
    return run(std::move(exchange), who, std::move(plan), *ready);
  }
  auto job = [this, run, exchange, who, plan = std::make_shared<GenerationPlan>(std::move(plan)),
              reply = std::make_shared<const ReplyConstraint>(std::move(reply))]() {
    auto constraint = structured_.compile(*reply);
    if (!constraint) return respondWithApiError(*exchange, constraint.error());
    run(exchange, who, std::move(*plan), *constraint);
  };
  if (blocking_ == nullptr) return job();
  blocking_->submit(BlockingPool::tenant(who.team), exchange, std::move(job));
}

GenerationPlan Gateway::newPlan(std::string response_id, std::string requested_model, bool stream,
                                const std::vector<std::string>& ignored,
                                const std::vector<std::string>& hosted_tools) const {
  GenerationPlan plan;
  plan.served_model = options_.model_id;
  plan.requested_model = std::move(requested_model);
  plan.response_id = std::move(response_id);
  plan.stream = stream;
  plan.headers = stream ? HttpHeaders{{"content-type", "text/event-stream"},
                                      {"cache-control", "no-cache"},
                                      {"x-accel-buffering", "no"}}
                        : jsonHeaders();
  // What the request asked for that had no effect, and hosted tools left out of the prompt.
  if (!ignored.empty()) plan.headers.add("x-latentgate-ignored", joined(ignored));
  if (!hosted_tools.empty()) plan.headers.add("x-latentgate-hosted-tools-skipped", joined(hosted_tools));
  return plan;
}

}  // namespace lg::proxy
