// gateway_bench: load against a running `latentgate serve` over TLS with
// keep-alive, from one client thread (Asio coroutines), printing one JSON line
// per run. docs/benchmarks.md has the runs and the commands.
//
//   --mode overhead: C connections each send small non-streamed chat
//     completions back to back for S seconds. Per request the client's latency
//     (request written to response read) minus the engine's time from the
//     response's Server-Timing `total` (submit to final event) is what the
//     gateway adds: TLS, HTTP, JSON, template rendering, tokenizing, handing
//     events between threads, building the response. Reports its percentiles,
//     and billing's part of it: Server-Timing `ledger` is the wait from the
//     final event to the request's ledger entry being synced (group commit),
//     the one step billing adds to a response's path (docs/billing.md).
//   --mode agent: N concurrent sessions of T turns each, like a coding agent:
//     a long system prompt, a growing conversation (each reply appended before
//     the next user turn), streamed; time to the first content token as the
//     client sees it, end-to-end latency and output tokens per second; the
//     share of prompt tokens served by the cache, overall and in the turns
//     after the first (the history: earlier replies, cache.reply_ids_*);
//     --replies-out writes the replies, so that runs can be compared.
//
// Random-weight replies run to max_tokens (the bench preset), so every run does
// the same work.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
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
  std::string key;
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

awaitable<void> connect(Stream& stream, const Args& args) {
  asio::ip::tcp::endpoint endpoint(asio::ip::make_address(args.host), args.port);
  co_await beast::get_lowest_layer(stream).async_connect(endpoint, use_awaitable);
  beast::get_lowest_layer(stream).socket().set_option(asio::ip::tcp::no_delay(true));
  co_await stream.async_handshake(asio::ssl::stream_base::client, use_awaitable);
}

http::request<http::string_body> post(const Args& args, std::string target, std::string body) {
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, args.host);
  req.set(http::field::authorization, "Bearer " + args.key);
  req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = std::move(body);
  req.prepare_payload();
  return req;
}

// ------------------------------------------------------------------ overhead

struct OverheadStats {
  std::vector<double> latency_ms, engine_ms, overhead_ms, ledger_ms, ledger_share;
  int errors = 0;
};

awaitable<void> overheadConnection(asio::ssl::context& tls, const Args& args, int index, Clock::time_point end,
                                   OverheadStats& stats) {
  Stream stream(co_await asio::this_coro::executor, tls);
  try {
    co_await connect(stream, args);
    beast::flat_buffer buffer;
    for (int n = 0; Clock::now() < end; ++n) {
      // A different short prompt each time, so that no request is a pure cache hit.
      const json body = {{"model", args.model},
                         {"max_tokens", 1},
                         {"temperature", 0},
                         {"messages", {{{"role", "user"}, {"content", "conn " + std::to_string(index) + " request " +
                                                                          std::to_string(n) + ": hello"}}}}};
      auto req = post(args, "/v1/chat/completions", body.dump());
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

struct AgentStats {
  std::vector<double> ttft_ms, server_ttft_ms, latency_ms;
  std::vector<double> first_turn_ttft_ms, later_turn_ttft_ms;
  int64_t output_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
  int64_t later_prompt_tokens = 0, later_cached_tokens = 0;  // turns after each session's first
  int errors = 0;
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

awaitable<void> agentSession(asio::ssl::context& tls, const Args& args, int session, AgentStats& stats) {
  Stream stream(co_await asio::this_coro::executor, tls);
  std::mt19937 rng(1000 + session);
  try {
    co_await connect(stream, args);
    beast::flat_buffer buffer;
    // Every session has the same system prompt (the agent's instructions and tools).
    std::mt19937 shared_rng(7);
    json messages = json::array({{{"role", "system"}, {"content", words(shared_rng, args.system_words)}}});
    for (int turn = 0; turn < args.turns; ++turn) {
      messages.push_back({{"role", "user"}, {"content", "session " + std::to_string(session) + ": " + words(rng, args.turn_words)}});
      const json body = {{"model", args.model},           {"messages", messages},
                         {"max_tokens", args.reply_tokens}, {"temperature", 0},
                         {"stream", true},                 {"stream_options", {{"include_usage", true}}}};
      auto req = post(args, "/v1/chat/completions", body.dump());
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
      if (usage.is_object()) {
        stats.output_tokens += usage.value("completion_tokens", 0);
        stats.prompt_tokens += usage.value("prompt_tokens", 0);
        stats.cached_tokens += usage.value("prompt_cache_hit_tokens", 0);
        if (turn > 0) {
          stats.later_prompt_tokens += usage.value("prompt_tokens", 0);
          stats.later_cached_tokens += usage.value("prompt_cache_hit_tokens", 0);
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

json runAgent(asio::ssl::context& tls, const Args& args) {
  asio::io_context io;
  AgentStats stats;
  const auto start = Clock::now();
  for (int i = 0; i < args.sessions; ++i) asio::co_spawn(io, agentSession(tls, args, i, stats), asio::detached);
  io.run();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  if (!args.replies_out.empty()) {
    json all = json::array();
    for (const auto& [session, replies] : stats.replies) all.push_back(replies);
    std::ofstream(args.replies_out) << all.dump() << "\n";
  }
  return {{"mode", "agent"},
          {"label", args.label},
          {"sessions", args.sessions},
          {"turns", args.turns},
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
          {"hit_rate", stats.prompt_tokens ? double(stats.cached_tokens) / double(stats.prompt_tokens) : 0.0},
          {"later_turns_hit_rate", stats.later_prompt_tokens ? double(stats.later_cached_tokens) /
                                                                   double(stats.later_prompt_tokens)
                                                             : 0.0},
          {"output_tokens", stats.output_tokens},
          {"output_tokens_per_s", double(stats.output_tokens) / wall},
          {"requests_per_s", double(stats.latency_ms.size()) / wall}};
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Load against a running latentgate serve over TLS (docs/benchmarks.md)"};
  app.add_option("--mode", args.mode, "overhead or agent")->check(CLI::IsMember({"overhead", "agent"}));
  app.add_option("--host", args.host, "Server address (default 127.0.0.1)");
  app.add_option("--port", args.port, "Server port")->required();
  app.add_option("--key", args.key, "API key")->required();
  app.add_option("--ca", args.ca_file, "CA certificate to trust (DATA/tls/ca.crt)")->required();
  app.add_option("--model", args.model, "Model name (default deepseek-chat)");
  app.add_option("--label", args.label, "Label copied into the output");
  app.add_option("--connections", args.connections, "overhead: concurrent keep-alive connections (default 64)");
  app.add_option("--seconds", args.seconds, "overhead: how long (default 10)");
  app.add_option("--sessions", args.sessions, "agent: concurrent sessions (default 3)");
  app.add_option("--turns", args.turns, "agent: turns per session (default 4)");
  app.add_option("--system-words", args.system_words, "agent: system prompt words (default 1500)");
  app.add_option("--turn-words", args.turn_words, "agent: words per user turn (default 60)");
  app.add_option("--reply-tokens", args.reply_tokens, "agent: max_tokens per reply (default 32)");
  app.add_option("--replies-out", args.replies_out, "agent: write every session's replies here (JSON), to compare runs");
  CLI11_PARSE(app, argc, argv);

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
