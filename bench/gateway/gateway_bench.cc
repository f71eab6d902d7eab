// gateway_bench: load against a running `latentgate serve` over TLS with
// keep-alive, from one client thread (Asio coroutines), printing one JSON line
// per run. docs/benchmarks.md has the runs and the commands.
//
//   --mode overhead: C connections each send small non-streamed chat
//     completions back to back for S seconds. Per request the client's latency
//     (request written to response read) minus the engine's time from the
//     response's Server-Timing `total` (submit to final event) is what the
//     gateway adds: TLS, HTTP, JSON, template rendering, tokenizing, handing
//     events between threads, building the response. --prompt-words W puts W
//     words after each request's own opening, so that every request misses
//     on about W / 64 full blocks of 64 tokens (a word is about a token;
//     without it no prompt fills a block). Reports its percentiles, and
//     billing's part of it: Server-Timing `ledger` is the wait from the
//     final event to the request's ledger entry being synced (group commit),
//     the one step billing adds to a response's path (docs/billing.md).
//   --mode agent: N concurrent sessions of T turns each, like a coding agent:
//     a long system prompt, a growing conversation (each reply appended before
//     the next user turn), streamed; time to the first content token as the
//     client sees it, end-to-end latency and output tokens per second; the
//     share of prompt tokens served by the cache, overall and in the turns
//     after the first (the history: earlier replies, cache.reply_ids_*);
//     --replies-out writes the replies, so that runs can be compared.
//     Several replicas (--ports) and several teams (--keys: session i uses
//     key i mod K, and each key's sessions share their own system prompt):
//     --route first (every request to the first port: one replica, or a
//     balancer in front), round-robin (each request to the next replica in
//     turn), or oracle (the conversation rendered to token ids by
//     /v1/chat/completions/render on the first replica, scored by an llm-d
//     like index's POST /score at --oracle, sent to the replica with the most
//     matched blocks, ties in turn). One connection per (session, replica),
//     opened when first used. Reports the cache hit rate overall and per
//     replica (docs/benchmarks.md, "Routing by prefix across three replicas").
//
// Random-weight replies run to max_tokens (the bench preset), so every run does
// the same work.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::awaitable;
using asio::use_awaitable;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using Stream = beast::ssl_stream<beast::tcp_stream>;

struct Args {
  std::string mode = "overhead";
  std::string host = "127.0.0.1";
  uint16_t port = 8443;
  std::vector<uint16_t> ports;  // agent: the replicas (default: --port)
  std::string key;
  std::vector<std::string> keys;  // agent: one per team (default: --key)
  std::string route = "first";
  std::string oracle;        // HOST:PORT of the index's plain-HTTP POST /score
  std::string oracle_model;  // the model in the events' topic (default: --model)
  bool speculate = false;    // oracle: tell the index where each request went (POST /speculate)
  std::string ties = "turn";  // oracle: equal scores go in turn, or by a hash of the first block
  std::string ca_file;
  std::string model = "deepseek-chat";
  std::string label;
  int connections = 64;
  double seconds = 10;
  int sessions = 3;
  int turns = 4;
  int system_words = 1500;
  int turn_words = 60;
  int reply_tokens = 32;
  int prompt_words = 0;     // overhead: words after each request's own opening
  std::string replies_out;  // agent: where to write every reply (JSON), to compare runs
};

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

json summary(const std::vector<double>& v) {
  return {{"p50", percentile(v, 0.50)}, {"p90", percentile(v, 0.90)}, {"p99", percentile(v, 0.99)},
          {"max", v.empty() ? 0.0 : *std::max_element(v.begin(), v.end())}};
}

// The value of `name;dur=X` in a Server-Timing header or comment; -1 if absent.
double timingValue(std::string_view header, std::string_view name) {
  const std::string needle = std::string(name) + ";dur=";
  const size_t at = header.find(needle);
  if (at == std::string_view::npos) return -1;
  return std::atof(std::string(header.substr(at + needle.size())).c_str());
}

awaitable<void> connect(Stream& stream, const Args& args, uint16_t port) {
  asio::ip::tcp::endpoint endpoint(asio::ip::make_address(args.host), port);
  co_await beast::get_lowest_layer(stream).async_connect(endpoint, use_awaitable);
  beast::get_lowest_layer(stream).socket().set_option(asio::ip::tcp::no_delay(true));
  co_await stream.async_handshake(asio::ssl::stream_base::client, use_awaitable);
}

http::request<http::string_body> post(const Args& args, const std::string& key, std::string target,
                                      std::string body) {
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, args.host);
  if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
  req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = std::move(body);
  req.prepare_payload();
  return req;
}

// ------------------------------------------------------------------ overhead

std::string words(std::mt19937& rng, int n);

struct OverheadStats {
  std::vector<double> latency_ms, engine_ms, overhead_ms, ledger_ms, ledger_share;
  int errors = 0;
};

awaitable<void> overheadConnection(asio::ssl::context& tls, const Args& args, int index, Clock::time_point end,
                                   OverheadStats& stats) {
  Stream stream(co_await asio::this_coro::executor, tls);
  try {
    co_await connect(stream, args, args.port);
    beast::flat_buffer buffer;
    std::mt19937 rng(static_cast<uint32_t>(index));
    const std::string filler = args.prompt_words > 0 ? " " + words(rng, args.prompt_words) : "";
    for (int n = 0; Clock::now() < end; ++n) {
      // A different prompt each time (its opening), so that no request is a pure cache hit.
      const json body = {{"model", args.model},
                         {"max_tokens", 1},
                         {"temperature", 0},
                         {"messages", {{{"role", "user"}, {"content", "conn " + std::to_string(index) + " request " +
                                                                          std::to_string(n) + ": hello" + filler}}}}};
      auto req = post(args, args.key, "/v1/chat/completions", body.dump());
      const auto t0 = Clock::now();
      co_await http::async_write(stream, req, use_awaitable);
      http::response<http::string_body> res;
      co_await http::async_read(stream, buffer, res, use_awaitable);
      const double latency = ms(Clock::now() - t0);
      const double engine = timingValue(std::string(res["server-timing"]), "total");
      if (res.result_int() != 200 || engine < 0) {
        ++stats.errors;
        continue;
      }
      stats.latency_ms.push_back(latency);
      stats.engine_ms.push_back(engine);
      stats.overhead_ms.push_back(latency - engine);
      const double ledger = timingValue(std::string(res["server-timing"]), "ledger");
      if (ledger >= 0) {
        stats.ledger_ms.push_back(ledger);
        stats.ledger_share.push_back(ledger / std::max(latency - engine, 1e-6));
      }
    }
  } catch (const std::exception& e) {
    ++stats.errors;
    std::cerr << "connection " << index << ": " << e.what() << "\n";
  }
}

json runOverhead(asio::ssl::context& tls, const Args& args) {
  asio::io_context io;
  OverheadStats stats;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(args.seconds));
  for (int i = 0; i < args.connections; ++i) {
    asio::co_spawn(io, overheadConnection(tls, args, i, end, stats), asio::detached);
  }
  io.run();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  return {{"mode", "overhead"},
          {"label", args.label},
          {"connections", args.connections},
          {"requests", stats.latency_ms.size()},
          {"errors", stats.errors},
          {"requests_per_s", static_cast<double>(stats.latency_ms.size()) / wall},
          {"latency_ms", summary(stats.latency_ms)},
          {"engine_ms", summary(stats.engine_ms)},
          {"overhead_ms", summary(stats.overhead_ms)},
          {"ledger_ms", summary(stats.ledger_ms)},
          // Per request, the ledger wait over the gateway's overhead.
          {"billing_share_of_overhead", summary(stats.ledger_share)}};
}

// --------------------------------------------------------------------- agent

struct ReplicaStats {
  int64_t requests = 0, prompt_tokens = 0, cached_tokens = 0;
};

struct AgentStats {
  std::vector<double> ttft_ms, server_ttft_ms, latency_ms;
  std::vector<double> first_turn_ttft_ms, later_turn_ttft_ms;
  int64_t output_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
  int64_t later_prompt_tokens = 0, later_cached_tokens = 0;  // turns after each session's first
  int errors = 0;
  // Routing: per replica, and for the oracle the time to render and score,
  // the blocks the chosen replica was said to hold, and the requests whose
  // best score was shared (then sent in turn), zero scores included.
  std::vector<ReplicaStats> replicas;
  size_t next_replica = 0;  // round robin, and the oracle's ties
  std::vector<double> route_ms, render_ms, score_ms;
  int64_t oracle_blocks = 0, oracle_ties = 0, oracle_zero = 0;
  std::vector<ReplicaStats> turns;  // the same counts per turn (all replicas)
  std::map<int, std::vector<std::string>> replies;  // by session, in turn order
};

std::string words(std::mt19937& rng, int n) {
  static const char* kWords[] = {"the", "tool", "shell", "command", "file", "read", "write", "patch", "apply",
                                 "sandbox", "approval", "user", "assistant", "agent", "repository", "code", "test",
                                 "build", "run", "output", "error", "function", "argument", "return", "value"};
  std::string out;
  for (int i = 0; i < n; ++i) {
    out += (i ? " " : "");
    out += kWords[rng() % (sizeof kWords / sizeof *kWords)];
  }
  return out;
}

// A session's connections: one per replica, opened when first used, and one
// (plain HTTP) to the oracle.
struct SessionConnections {
  struct Tls {
    std::unique_ptr<Stream> stream;
    beast::flat_buffer buffer;
  };
  std::vector<Tls> replicas;
  std::unique_ptr<beast::tcp_stream> oracle;
  beast::flat_buffer oracle_buffer;
};

awaitable<SessionConnections::Tls*> replicaConnection(asio::ssl::context& tls, const Args& args,
                                                      SessionConnections& conns, size_t r) {
  SessionConnections::Tls& c = conns.replicas[r];
  if (!c.stream) {
    c.stream = std::make_unique<Stream>(co_await asio::this_coro::executor, tls);
    co_await connect(*c.stream, args, args.ports[r]);
  }
  co_return &c;
}

awaitable<void> connectOracle(const Args& args, SessionConnections& conns) {
  const size_t colon = args.oracle.rfind(':');
  conns.oracle = std::make_unique<beast::tcp_stream>(co_await asio::this_coro::executor);
  asio::ip::tcp::endpoint endpoint(asio::ip::make_address(args.oracle.substr(0, colon)),
                                   static_cast<uint16_t>(std::stoi(args.oracle.substr(colon + 1))));
  co_await conns.oracle->async_connect(endpoint, use_awaitable);
  conns.oracle->socket().set_option(asio::ip::tcp::no_delay(true));
}

// The index's POST `path` with `body`; its JSON answer.
awaitable<json> oracleCall(const Args& args, SessionConnections& conns, const std::string& path, const json& body) {
  if (!conns.oracle) co_await connectOracle(args, conns);
  auto req = post(args, "", path, body.dump());
  req.set(http::field::host, args.oracle);
  co_await http::async_write(*conns.oracle, req, use_awaitable);
  http::response<http::string_body> res;
  co_await http::async_read(*conns.oracle, conns.oracle_buffer, res, use_awaitable);
  const json j = json::parse(res.body(), nullptr, false);
  if (res.result_int() != 200 || !j.is_object()) {
    throw std::runtime_error("oracle " + path + ": HTTP " + std::to_string(res.result_int()) + " " + res.body().substr(0, 200));
  }
  co_return j;
}

// The index's POST /score for `ids`: {replica name: matched blocks}.
awaitable<json> oracleScores(const Args& args, SessionConnections& conns, const json& ids) {
  const json body = {{"token_ids", ids}, {"model", args.oracle_model.empty() ? args.model : args.oracle_model}};
  const json j = co_await oracleCall(args, conns, std::string("/score"), body);
  if (!j.contains("scores") || !j["scores"].is_object()) throw std::runtime_error("oracle /score: no scores");
  co_return j["scores"];
}

// Which replica gets the next request of a session whose request body is `body`.
awaitable<size_t> route(asio::ssl::context& tls, const Args& args, const std::string& key, SessionConnections& conns,
                        const json& body, AgentStats& stats) {
  const size_t n = args.ports.size();
  if (args.route == "first") co_return 0;
  if (args.route == "round-robin") co_return stats.next_replica++ % n;
  // oracle: the server's own token ids (its tokenizer and chat template) ...
  const auto t0 = Clock::now();
  SessionConnections::Tls* c = co_await replicaConnection(tls, args, conns, 0);
  auto req = post(args, key, "/v1/chat/completions/render", body.dump());
  co_await http::async_write(*c->stream, req, use_awaitable);
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  co_await http::async_read(*c->stream, c->buffer, parser, use_awaitable);
  const auto t1 = Clock::now();
  const json rendered = json::parse(parser.get().body(), nullptr, false);
  if (parser.get().result_int() != 200 || !rendered.is_object() || !rendered.contains("token_ids")) {
    throw std::runtime_error("render: HTTP " + std::to_string(parser.get().result_int()) + " " +
                             parser.get().body().substr(0, 200));
  }
  // ... scored by the index; a replica is named HOST:PORT (llm-d's pod id) or PORT.
  const json scores = co_await oracleScores(args, conns, rendered["token_ids"]);
  stats.render_ms.push_back(ms(t1 - t0));
  stats.score_ms.push_back(ms(Clock::now() - t1));
  std::vector<int64_t> blocks(n, 0);
  std::vector<std::string> names(n);  // the index's name of each replica
  for (const auto& [name, value] : scores.items()) {
    if (!value.is_number_integer()) continue;
    const size_t colon = name.rfind(':');
    const std::string port = colon == std::string::npos ? name : name.substr(colon + 1);
    for (size_t r = 0; r < n; ++r) {
      if (port == std::to_string(args.ports[r])) {
        blocks[r] = std::max(blocks[r], value.get<int64_t>());
        names[r] = name;
      }
    }
  }
  const int64_t top = *std::max_element(blocks.begin(), blocks.end());
  const auto tied = std::count(blocks.begin(), blocks.end(), top);
  size_t chosen = 0;
  const json& ids = rendered["token_ids"];
  if (args.ties == "prefix-hash" && tied > 1 && ids.size() >= 64) {
    // The tied replicas in order, the one at a hash of the prompt's first
    // block: requests that share a first block (a team's system prompt) and
    // that nobody's events tell apart yet go to the same replica.
    uint64_t h = 1469598103934665603ULL;  // FNV-1a over the first 64 ids
    for (size_t i = 0; i < 64; ++i) h = (h ^ ids[i].get<uint64_t>()) * 1099511628211ULL;
    std::vector<size_t> candidates;
    for (size_t r = 0; r < n; ++r) {
      if (blocks[r] == top) candidates.push_back(r);
    }
    chosen = candidates[h % candidates.size()];
  } else {
    for (size_t i = 0; i < n; ++i) {
      const size_t r = (stats.next_replica + i) % n;
      if (blocks[r] == top) {
        chosen = r;
        break;
      }
    }
  }
  if (tied > 1) {
    ++stats.oracle_ties;
    stats.next_replica = chosen + 1;
  }
  if (top == 0) ++stats.oracle_zero;
  stats.oracle_blocks += top;
  // llm-d's speculative indexing: the request's blocks count as on the chosen
  // replica before its events say so, so that its team's next sessions follow.
  if (args.speculate && !names[chosen].empty()) {
    const json speculation = {{"token_ids", rendered["token_ids"]},
                              {"model", args.oracle_model.empty() ? args.model : args.oracle_model},
                              {"pod", names[chosen]}};
    co_await oracleCall(args, conns, std::string("/speculate"), speculation);
  }
  stats.route_ms.push_back(ms(Clock::now() - t0));
  co_return chosen;
}

awaitable<void> agentSession(asio::ssl::context& tls, const Args& args, int session, SessionConnections& conns,
                             AgentStats& stats) {
  std::mt19937 rng(1000 + session);
  // Sessions take the keys in turn: with several keys, several teams.
  const size_t team = static_cast<size_t>(session) % args.keys.size();
  const std::string& key = args.keys[team];
  try {
    // Every session of a team has the team's system prompt (the agent's
    // instructions and tools); the first team's is the one a single key has.
    std::mt19937 shared_rng(static_cast<std::mt19937::result_type>(7 + team));
    json messages = json::array({{{"role", "system"}, {"content", words(shared_rng, args.system_words)}}});
    for (int turn = 0; turn < args.turns; ++turn) {
      messages.push_back({{"role", "user"}, {"content", "session " + std::to_string(session) + ": " + words(rng, args.turn_words)}});
      const json body = {{"model", args.model},           {"messages", messages},
                         {"max_tokens", args.reply_tokens}, {"temperature", 0},
                         {"stream", true},                 {"stream_options", {{"include_usage", true}}}};
      const size_t replica = co_await route(tls, args, key, conns, body, stats);
      SessionConnections::Tls* conn = co_await replicaConnection(tls, args, conns, replica);
      Stream& stream = *conn->stream;
      beast::flat_buffer& buffer = conn->buffer;
      auto req = post(args, key, "/v1/chat/completions", body.dump());
      const auto t0 = Clock::now();
      co_await http::async_write(stream, req, use_awaitable);
      http::response_parser<http::string_body> parser;
      parser.body_limit(64 << 20);
      co_await http::async_read_header(stream, buffer, parser, use_awaitable);
      // The first event only opens the stream (role, empty content); the
      // first token arrives with the first event that carries content.
      double ttft = -1;
      size_t scanned = 0;
      while (!parser.is_done()) {
        co_await http::async_read_some(stream, buffer, parser, use_awaitable);
        const std::string& b = parser.get().body();
        if (ttft < 0) {
          for (size_t at; (at = b.find("\n\n", scanned)) != std::string::npos; scanned = at + 2) {
            const std::string_view event(b.data() + scanned, at - scanned);
            if (event.find("\"content\":\"") != std::string_view::npos &&
                event.find("\"content\":\"\"") == std::string_view::npos) {
              ttft = ms(Clock::now() - t0);
              break;
            }
          }
        }
      }
      const double latency = ms(Clock::now() - t0);
      const std::string& b = parser.get().body();
      if (parser.get().result_int() != 200) {
        ++stats.errors;
        std::cerr << "session " << session << " turn " << turn << ": HTTP " << parser.get().result_int() << " "
                  << b.substr(0, 300) << "\n";
        co_return;
      }
      // The reply as the client saw it, and the usage in the last chunk.
      std::string reply;
      json usage;
      for (size_t pos = 0, at; (at = b.find("data: ", pos)) != std::string::npos; pos = at + 6) {
        const size_t end = b.find("\n\n", at);
        const std::string data = b.substr(at + 6, end - at - 6);
        if (data == "[DONE]") break;
        const json chunk = json::parse(data, nullptr, false);
        if (chunk.is_discarded()) continue;
        if (chunk.contains("usage") && chunk["usage"].is_object()) usage = chunk["usage"];
        if (chunk.contains("choices") && !chunk["choices"].empty()) {
          const json& d = chunk["choices"][0]["delta"];
          if (d.contains("content") && d["content"].is_string()) reply += d["content"].get<std::string>();
        }
      }
      stats.ttft_ms.push_back(ttft);
      (turn == 0 ? stats.first_turn_ttft_ms : stats.later_turn_ttft_ms).push_back(ttft);
      stats.server_ttft_ms.push_back(timingValue(b, "ttft"));
      stats.latency_ms.push_back(latency);
      ReplicaStats& rs = stats.replicas[replica];
      ReplicaStats& ts = stats.turns[static_cast<size_t>(turn)];
      ++rs.requests;
      ++ts.requests;
      if (usage.is_object()) {
        const int64_t prompt = usage.value("prompt_tokens", 0), cached = usage.value("prompt_cache_hit_tokens", 0);
        stats.output_tokens += usage.value("completion_tokens", 0);
        stats.prompt_tokens += prompt;
        stats.cached_tokens += cached;
        rs.prompt_tokens += prompt;
        rs.cached_tokens += cached;
        ts.prompt_tokens += prompt;
        ts.cached_tokens += cached;
        if (turn > 0) {
          stats.later_prompt_tokens += prompt;
          stats.later_cached_tokens += cached;
        }
      }
      stats.replies[session].push_back(reply);
      messages.push_back({{"role", "assistant"}, {"content", reply}});
    }
  } catch (const std::exception& e) {
    ++stats.errors;
    std::cerr << "session " << session << ": " << e.what() << "\n";
  }
}

double ratio(int64_t a, int64_t b) { return b ? double(a) / double(b) : 0.0; }

// The sessions' connections to the index, opened one after another before
// the sessions start, as a router keeps its own: opened all at once, they
// would overflow a small listen backlog (Python's http.server listens with 5)
// and wait a second for the SYN's retransmission.
awaitable<void> connectOracles(const Args& args, std::vector<SessionConnections>& conns) {
  try {
    for (SessionConnections& c : conns) co_await connectOracle(args, c);
  } catch (const std::exception& e) {
    std::cerr << "oracle " << args.oracle << ": " << e.what() << "\n";
    for (SessionConnections& c : conns) c.oracle.reset();  // the sessions try again, and report
  }
}

json runAgent(asio::ssl::context& tls, const Args& args) {
  asio::io_context io;
  AgentStats stats;
  stats.replicas.resize(args.ports.size());
  stats.turns.resize(static_cast<size_t>(std::max(args.turns, 0)));
  std::vector<SessionConnections> conns(static_cast<size_t>(std::max(args.sessions, 0)));
  for (SessionConnections& c : conns) c.replicas.resize(args.ports.size());
  if (args.route == "oracle") {
    asio::co_spawn(io, connectOracles(args, conns), asio::detached);
    io.run();
    io.restart();
  }
  const auto start = Clock::now();
  for (int i = 0; i < args.sessions; ++i) {
    asio::co_spawn(io, agentSession(tls, args, i, conns[static_cast<size_t>(i)], stats), asio::detached);
  }
  io.run();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  if (!args.replies_out.empty()) {
    json all = json::array();
    for (const auto& [session, replies] : stats.replies) all.push_back(replies);
    std::ofstream(args.replies_out) << all.dump() << "\n";
  }
  json replicas = json::array(), replica_requests = json::array();
  for (size_t r = 0; r < args.ports.size(); ++r) {
    const ReplicaStats& rs = stats.replicas[r];
    replicas.push_back({{"port", args.ports[r]},
                        {"requests", rs.requests},
                        {"prompt_tokens", rs.prompt_tokens},
                        {"cached_tokens", rs.cached_tokens},
                        {"hit_rate", ratio(rs.cached_tokens, rs.prompt_tokens)}});
    replica_requests.push_back(rs.requests);
  }
  json turn_hit_rate = json::array();
  for (const ReplicaStats& ts : stats.turns) turn_hit_rate.push_back(ratio(ts.cached_tokens, ts.prompt_tokens));
  json out = {{"mode", "agent"},
              {"label", args.label},
              {"sessions", args.sessions},
              {"turns", args.turns},
              {"teams", args.keys.size()},
              {"route", args.route},
              {"requests", stats.latency_ms.size()},
              {"errors", stats.errors},
              {"wall_s", wall},
              {"ttft_ms", summary(stats.ttft_ms)},
              {"first_turn_ttft_ms", summary(stats.first_turn_ttft_ms)},
              {"later_turn_ttft_ms", summary(stats.later_turn_ttft_ms)},
              {"server_ttft_ms", summary(stats.server_ttft_ms)},
              {"latency_ms", summary(stats.latency_ms)},
              {"prompt_tokens", stats.prompt_tokens},
              {"cached_tokens", stats.cached_tokens},
              {"hit_rate", ratio(stats.cached_tokens, stats.prompt_tokens)},
              {"later_turns_hit_rate", ratio(stats.later_cached_tokens, stats.later_prompt_tokens)},
              {"output_tokens", stats.output_tokens},
              {"output_tokens_per_s", double(stats.output_tokens) / wall},
              {"requests_per_s", double(stats.latency_ms.size()) / wall},
              {"turn_hit_rate", turn_hit_rate},
              {"replica_requests", replica_requests},
              {"replicas", replicas}};
  if (args.route == "oracle") {
    out["route_ms"] = summary(stats.route_ms);
    out["render_ms"] = summary(stats.render_ms);
    out["score_ms"] = summary(stats.score_ms);
    out["oracle_blocks"] = stats.oracle_blocks;
    out["oracle_ties"] = stats.oracle_ties;
    out["oracle_zero_scores"] = stats.oracle_zero;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Load against a running latentgate serve over TLS (docs/benchmarks.md)"};
  app.add_option("--mode", args.mode, "overhead or agent")->check(CLI::IsMember({"overhead", "agent"}));
  app.add_option("--host", args.host, "Server address (default 127.0.0.1)");
  auto* port = app.add_option("--port", args.port, "Server port");
  app.add_option("--ports", args.ports, "agent: the replicas' ports, P1,P2,... (instead of --port)")
      ->delimiter(',')
      ->excludes(port);
  auto* key = app.add_option("--key", args.key, "API key");
  app.add_option("--keys", args.keys, "agent: API keys K1,K2,..., one per team; session i uses key i mod K (instead of --key)")
      ->delimiter(',')
      ->excludes(key);
  app.add_option("--route", args.route, "agent: first (default), round-robin or oracle")
      ->check(CLI::IsMember({"first", "round-robin", "oracle"}));
  app.add_option("--oracle", args.oracle, "agent, --route oracle: HOST:PORT of the index's POST /score (plain HTTP)");
  app.add_option("--oracle-model", args.oracle_model, "agent, --route oracle: the model of the events' topic (default --model)");
  app.add_option("--ties", args.ties, "agent, --route oracle: equal scores go in turn (default) or by prefix-hash")
      ->check(CLI::IsMember({"turn", "prefix-hash"}));
  app.add_flag("--speculate", args.speculate,
               "agent, --route oracle: POST /speculate the chosen replica (the index's --speculative-ttl, llm-d's speculativeIndexing)");
  app.add_option("--ca", args.ca_file, "CA certificate to trust (DATA/tls/ca.crt)")->required();
  app.add_option("--model", args.model, "Model name (default deepseek-chat)");
  app.add_option("--label", args.label, "Label copied into the output");
  app.add_option("--connections", args.connections, "overhead: concurrent keep-alive connections (default 64)");
  app.add_option("--seconds", args.seconds, "overhead: how long (default 10)");
  app.add_option("--prompt-words", args.prompt_words,
                 "overhead: words after each request's own opening, so that its blocks miss (default 0)");
  app.add_option("--sessions", args.sessions, "agent: concurrent sessions (default 3)");
  app.add_option("--turns", args.turns, "agent: turns per session (default 4)");
  app.add_option("--system-words", args.system_words, "agent: system prompt words (default 1500)");
  app.add_option("--turn-words", args.turn_words, "agent: words per user turn (default 60)");
  app.add_option("--reply-tokens", args.reply_tokens, "agent: max_tokens per reply (default 32)");
  app.add_option("--replies-out", args.replies_out, "agent: write every session's replies here (JSON), to compare runs");
  CLI11_PARSE(app, argc, argv);
  if (args.ports.empty() && app.count("--port") == 0) {
    std::cerr << "gateway_bench: --port or --ports is required\n";
    return 2;
  }
  if (args.keys.empty() && args.key.empty()) {
    std::cerr << "gateway_bench: --key or --keys is required\n";
    return 2;
  }
  if (args.ports.empty()) args.ports = {args.port};
  if (args.keys.empty()) args.keys = {args.key};
  args.port = args.ports[0];
  args.key = args.keys[0];
  if (args.mode == "overhead" && (args.ports.size() > 1 || args.keys.size() > 1)) {
    std::cerr << "gateway_bench: --mode overhead takes one port and one key\n";
    return 2;
  }
  if (args.route == "oracle" && args.oracle.find(':') == std::string::npos) {
    std::cerr << "gateway_bench: --route oracle needs --oracle HOST:PORT\n";
    return 2;
  }

  asio::ssl::context tls(asio::ssl::context::tls_client);
  tls.set_verify_mode(asio::ssl::verify_peer);
  boost::system::error_code ec;
  tls.load_verify_file(args.ca_file, ec);
  if (ec) {
    std::cerr << "gateway_bench: cannot read " << args.ca_file << ": " << ec.message() << "\n";
    return 2;
  }
  const json out = args.mode == "overhead" ? runOverhead(tls, args) : runAgent(tls, args);
  std::cout << out.dump() << std::endl;
  return 0;
}
