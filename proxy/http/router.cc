#include "proxy/http/router.h"

#include "proxy/http/blocking_pool.h"
#include "proxy/http/http_errors.h"

namespace lg::proxy {

void Router::add(std::string method, std::string path, Handler handler, Runs runs, BodySize body) {
  routes_.push_back(Route{std::move(method), std::move(path), false, std::move(handler), runs, body, nullptr});
}

void Router::addPrefix(std::string method, std::string prefix, Handler handler, Runs runs, BodySize body) {
  routes_.push_back(Route{std::move(method), std::move(prefix), true, std::move(handler), runs, body, nullptr});
}

void Router::add(std::string method, std::string path, GuardedHandler handler, Runs runs, BodySize body) {
  routes_.push_back(
      Route{std::move(method), std::move(path), false, std::move(handler.handler), runs, body, std::move(handler.guard)});
}

void Router::addPrefix(std::string method, std::string prefix, GuardedHandler handler, Runs runs, BodySize body) {
  routes_.push_back(Route{std::move(method), std::move(prefix), true, std::move(handler.handler), runs, body,
                          std::move(handler.guard)});
}

const Router::Route* Router::bestPath(std::string_view path) const {
  const Route* best = nullptr;
  size_t best_rank = 0;
  for (const Route& r : routes_) {
    const bool matches = r.prefix ? path.starts_with(r.path) : path == r.path;
    if (!matches) continue;
    const size_t rank = r.prefix ? r.path.size() + 1 : std::string::npos;  // exact beats any prefix
    if (best == nullptr || rank > best_rank) {
      best = &r;
      best_rank = rank;
    }
  }
  return best;
}

const Router::Route* Router::forMethod(const Route& best, std::string_view method, std::string* allow) const {
  for (const Route& r : routes_) {
    if (r.prefix != best.prefix || r.path != best.path) continue;
    if (r.method == method) return &r;
    if (allow != nullptr) *allow += (allow->empty() ? "" : ", ") + r.method;
  }
  return nullptr;
}

void Router::handle(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  // The best path match: exact, else the longest prefix. Among the routes for
  // that path, the one for this method.
  const Route* best = bestPath(request.path);
  if (best == nullptr) return respondWithApiError(*exchange, unknownUrlError(request.method, request.path));
  std::string allow;
  const Route* r = forMethod(*best, request.method, &allow);
  if (r == nullptr) {
    return respondWithApiError(*exchange, methodNotAllowedError(request.method, request.path),
                               HttpHeaders{{"allow", allow}});
  }
  if (r->runs == Runs::kBlocking && blocking_pool_ != nullptr) return blocking_pool_->run(r->handler, std::move(exchange));
  r->handler(request, std::move(exchange));
}

HeadDecision Router::preflight(const HttpRequest& head) const {
  HeadDecision d;
  const Route* best = bestPath(head.path);
  if (best == nullptr) {
    d.refusal = unknownUrlError(head.method, head.path);
    return d;
  }
  std::string allow;
  const Route* r = forMethod(*best, head.method, &allow);
  if (r == nullptr) {
    d.refusal = methodNotAllowedError(head.method, head.path);
    d.refusal_headers.add("allow", allow);
    return d;
  }
  d.max_body_bytes = r->body == BodySize::kLarge ? large_body_bytes_ : small_body_bytes_;
  if (r->guard) {
    d.refusal = r->guard(head);
    d.authenticated = !d.refusal.has_value();
  }
  return d;
}

Preflight Router::preflighter() const {
  return [this](const HttpRequest& head) { return preflight(head); };
}

std::vector<Router::RouteInfo> Router::routes() const {
  std::vector<RouteInfo> out;
  out.reserve(routes_.size());
  for (const Route& r : routes_) out.push_back(RouteInfo{r.method, r.path, r.prefix});
  return out;
}

int Router::find(std::string_view method, std::string_view path) const {
  const Route* best = bestPath(path);
  if (best == nullptr) return -1;
  const Route* r = forMethod(*best, method, nullptr);
  return r == nullptr ? -1 : static_cast<int>(r - routes_.data());
}

Handler Router::handler() const {
  return [this](const HttpRequest& request, std::shared_ptr<Exchange> exchange) { handle(request, std::move(exchange)); };
}

}  // namespace lg::proxy
