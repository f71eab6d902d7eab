#include "proxy/http/router.h"

#include "proxy/http/blocking_pool.h"
#include "proxy/http/http_errors.h"

namespace lg::proxy {

void Router::add(std::string method, std::string path, Handler handler, Runs runs) {
  routes_.push_back(Route{std::move(method), std::move(path), false, std::move(handler), runs});
}

void Router::addPrefix(std::string method, std::string prefix, Handler handler, Runs runs) {
  routes_.push_back(Route{std::move(method), std::move(prefix), true, std::move(handler), runs});
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

void Router::handle(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  // The best path match: exact, else the longest prefix. Among the routes for
  // that path, the one for this method.
  const Route* best = bestPath(request.path);
  if (best == nullptr) return respondWithApiError(*exchange, unknownUrlError(request.method, request.path));
  std::string allow;
  for (const Route& r : routes_) {
    if (r.prefix != best->prefix || r.path != best->path) continue;
    if (r.method != request.method) {
      allow += (allow.empty() ? "" : ", ") + r.method;
      continue;
    }
    if (r.runs == Runs::kBlocking && blocking_pool_ != nullptr) return blocking_pool_->run(r.handler, std::move(exchange));
    return r.handler(request, std::move(exchange));
  }
  respondWithApiError(*exchange, methodNotAllowedError(request.method, request.path), HttpHeaders{{"allow", allow}});
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
  for (size_t i = 0; i < routes_.size(); ++i) {
    const Route& r = routes_[i];
    if (r.prefix == best->prefix && r.path == best->path && r.method == method) return static_cast<int>(i);
  }
  return -1;
}

Handler Router::handler() const {
  return [this](const HttpRequest& request, std::shared_ptr<Exchange> exchange) { handle(request, std::move(exchange)); };
}

}  // namespace lg::proxy
