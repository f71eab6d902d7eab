// serving_bench: the scheduler under an agent-like open-loop workload
// (docs/benchmarks.md, "Serving"), and how often DeepSeek's chat template
// re-renders a reply to exactly the ids that were generated.
//
//   serving_bench --model DIR [--rate R] [--requests N] [--system-tokens T]
//                 [--turn-tokens U] [--reply-tokens V] [--seed S]
//   serving_bench --model DIR --rerender-only
//
// Workload: agents share one long system prompt; each request is the next
// turn of a conversation (system prompt, earlier turns with the replies the
// model gave, a new user message), rendered with the model's chat template.
// Requests arrive open-loop as a Poisson process of rate R: each arrival
// takes the conversation that has waited longest for its next turn, or starts
// a new one when every conversation is still waiting for a reply. Three runs
// on one loaded model: the prefix cache on, off, and on at 4x the rate with
// a bounded queue, reporting TTFT and time per output token (p50/p99),
// throughput, the hit rate and the refusals.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cache/prefix_cache.h"
#include "cli/terminal_progress.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "serving/scheduler.h"
#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace lg::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string model_dir;
  double rate = 0.1;  // requests per second
  int requests = 16;
  int system_tokens = 2000;
  int turn_tokens = 50;
  int reply_tokens = 150;
  int step_tokens = 512;
  int threads = 0;
  uint64_t seed = 1;
  bool rerender_only = false;
  std::string phases = "on,off,4x";  // which runs: cache on, cache off, 4x the rate
  int overload_max_running = 4;      // sequences at once in the 4x run, so that its queue fills
};

// English-like filler text of about `tokens` tokens.
std::string textOfTokens(const text::Tokenizer& tok, int tokens, std::mt19937_64& rng) {
  static const char* kWords[] = {"the", "agent", "must", "call", "tools", "carefully", "and", "report", "results",
                                 "file", "search", "code", "review", "when", "user", "asks", "about", "tests",
                                 "build", "deploy", "cache", "prompt", "never", "always", "explain", "why"};
  std::string s;
  while (static_cast<int>(tok.encode(s).value().size()) < tokens) {
    for (int i = 0; i < 16; ++i) {
      s += kWords[rng() % (sizeof kWords / sizeof kWords[0])];
      s += (rng() % 9 == 0) ? ". " : " ";
    }
  }
  return s;
}

struct Conversation {
  json messages = json::array();
  std::vector<int32_t> last_prompt;  // the ids of the last turn sent
  std::vector<int32_t> last_reply;   // the ids generated for it
  bool waiting = false;              // a turn is in flight
  Clock::time_point idle_since;
};

struct Sample {
  double ttft = 0, tpot = 0;
  int prompt_tokens = 0, hit_tokens = 0, completion_tokens = 0;
  serving::FinishReason reason = serving::FinishReason::kStop;
  serving::Refusal refusal = serving::Refusal::kNone;
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

struct RunResult {
  std::string name;
  std::vector<Sample> samples;
  double wall_seconds = 0;
  int rerender_checked = 0, rerender_exact = 0;
  serving::SchedulerStats stats;
};

class Workload {
 public:
  Workload(const Args& args, const text::Tokenizer& tok, const text::ChatTemplate& tmpl)
      : args_(args), tok_(tok), tmpl_(tmpl), rng_(args.seed) {
    system_ = textOfTokens(tok_, args_.system_tokens, rng_);
  }

  RunResult run(const std::string& name, serving::Scheduler& scheduler, double rate) {
    RunResult result;
    result.name = name;
    std::mt19937_64 rng(args_.seed);  // the same arrivals and messages in every run
    std::exponential_distribution<double> gap(rate);
    std::vector<Conversation> conversations;
    serving::EventQueue events;
    struct InFlight {
      size_t conversation;
      std::vector<int32_t> ids;
    };
    std::map<uint64_t, InFlight> in_flight;
    const Clock::time_point start = Clock::now();
    Clock::time_point next_arrival = start;
    int submitted = 0, finished = 0;
    while (finished < args_.requests) {
      // Arrivals that are due.
      while (submitted < args_.requests && Clock::now() >= next_arrival) {
        size_t c = conversations.size();
        for (size_t i = 0; i < conversations.size(); ++i) {
          if (!conversations[i].waiting &&
              (c == conversations.size() || conversations[i].idle_since < conversations[c].idle_since)) {
            c = i;
          }
        }
        if (c == conversations.size()) {
          conversations.emplace_back();
          conversations[c].messages.push_back({{"role", "system"}, {"content", system_}});
        }
        Conversation& conv = conversations[c];
        conv.messages.push_back({{"role", "user"}, {"content", textOfTokens(tok_, args_.turn_tokens, rng)}});
        text::ChatRenderInput input;
        input.messages = &conv.messages;
        input.add_generation_prompt = true;
        text::PromptText prompt = tmpl_.render(input).value();
        std::vector<int32_t> ids = tok_.encodePrompt(prompt).value();
        if (!conv.last_prompt.empty()) {
          // Does the new turn begin with exactly the ids of the last turn and
          // its generated reply (what the cache holds)?
          std::vector<int32_t> before = conv.last_prompt;
          before.insert(before.end(), conv.last_reply.begin(), conv.last_reply.end());
          ++result.rerender_checked;
          if (ids.size() >= before.size() && std::equal(before.begin(), before.end(), ids.begin())) {
            ++result.rerender_exact;
          }
        }
        serving::GenerationRequest request(cache::TeamNamespace::ofTeam("bench").value());
        request.prompt = ids;
        request.sampling.temperature = 0.7f;
        request.sampling.seed = rng();
        request.sampling.max_tokens = args_.reply_tokens;
        serving::Submission sub = scheduler.submit(std::move(request), events.sink());
        ++submitted;
        next_arrival += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
        if (!sub) {
          Sample s;
          s.reason = serving::FinishReason::kRefused;
          s.refusal = sub.refused.reason;
          result.samples.push_back(s);
          ++finished;
          conv.messages.erase(conv.messages.end() - 1);  // the turn did not happen
          continue;
        }
        conv.waiting = true;
        in_flight[sub.handle.id()] = {c, std::move(ids)};
      }
      // Events until the next arrival.
      const auto wait = submitted < args_.requests ? std::max(Clock::duration::zero(), next_arrival - Clock::now())
                                                   : Clock::duration(std::chrono::seconds(600));
      std::optional<serving::StreamEvent> e = events.popFor(wait);
      if (e) {
        replies_[e->request_id].insert(replies_[e->request_id].end(), e->token_ids.begin(), e->token_ids.end());
        texts_[e->request_id] += e->text;
      }
      if (!e || !e->final) continue;
      const std::vector<int32_t>& reply = replies_[e->request_id];
      InFlight f = std::move(in_flight.at(e->request_id));
      in_flight.erase(e->request_id);
      Conversation& conv = conversations[f.conversation];
      conv.waiting = false;
      conv.idle_since = Clock::now();
      Sample s;
      s.reason = e->finish_reason;
      s.refusal = e->refusal;
      s.prompt_tokens = e->usage.prompt_tokens;
      s.hit_tokens = e->usage.hitTokens();
      s.completion_tokens = e->usage.completion_tokens;
      s.ttft = e->timing.first_token;
      s.tpot = e->usage.completion_tokens > 1 ? e->timing.decode / (e->usage.completion_tokens - 1) : 0;
      result.samples.push_back(s);
      ++finished;
      if (e->finish_reason == serving::FinishReason::kLength || e->finish_reason == serving::FinishReason::kStop) {
        conv.last_prompt = f.ids;
        conv.last_reply = reply;
        // The text the client saw (ids without a token in the vocabulary,
        // which random weights do sample, have none).
        conv.messages.push_back({{"role", "assistant"}, {"content", texts_[e->request_id]}});
      } else {
        conv.messages.erase(conv.messages.end() - 1);
      }
      replies_.erase(e->request_id);
      texts_.erase(e->request_id);
    }
    result.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    result.stats = scheduler.schedulerStats();
    return result;
  }

 private:
  const Args& args_;
  const text::Tokenizer& tok_;
  const text::ChatTemplate& tmpl_;
  std::mt19937_64 rng_;
  std::string system_;
  std::map<uint64_t, std::vector<int32_t>> replies_;
  std::map<uint64_t, std::string> texts_;
};

json summarize(const RunResult& r, double rate) {
  std::vector<double> ttft, tpot;
  int64_t prompt = 0, hits = 0, out = 0;
  std::map<std::string, int> refused;
  int completed = 0;
  for (const Sample& s : r.samples) {
    if (s.reason == serving::FinishReason::kRefused) {
      ++refused[std::string(serving::refusalName(s.refusal))];
      continue;
    }
    if (s.reason != serving::FinishReason::kLength && s.reason != serving::FinishReason::kStop) continue;
    ++completed;
    ttft.push_back(s.ttft);
    if (s.tpot > 0) tpot.push_back(s.tpot);
    prompt += s.prompt_tokens;
    hits += s.hit_tokens;
    out += s.completion_tokens;
  }
  return {
      {"run", r.name},
      {"rate_per_s", rate},
      {"requests", r.samples.size()},
      {"completed", completed},
      {"refused", refused},
      {"ttft_p50_s", percentile(ttft, 0.5)},
      {"ttft_p99_s", percentile(ttft, 0.99)},
      {"tpot_p50_ms", percentile(tpot, 0.5) * 1e3},
      {"tpot_p99_ms", percentile(tpot, 0.99) * 1e3},
      {"output_tokens_per_s", static_cast<double>(out) / r.wall_seconds},
      {"prompt_tokens", prompt},
      {"hit_rate", prompt > 0 ? static_cast<double>(hits) / static_cast<double>(prompt) : 0.0},
      {"wall_s", r.wall_seconds},
      {"steps", r.stats.steps},
      {"mean_step_tokens", r.stats.steps ? static_cast<double>(r.stats.step_tokens) / r.stats.steps : 0.0},
      {"preemptions", r.stats.preemptions},
      {"rerender_exact", r.rerender_exact},
      {"rerender_checked", r.rerender_checked},
  };
}

// Replies a real model would give (canonical BPE of natural text): does the
// next turn's rendering begin with the first turn's ids plus the reply's?
void rerenderReport(const text::Tokenizer& tok, const text::ChatTemplate& tmpl) {
  const std::vector<std::string> replies = {
      "Sure! Here is the plan:\n\n1. Read the file.\n2. Fix the bug.\n3. Run the tests.",
      "The function `parse_config` returns `None` when the key is missing; check for it before use.",
      "```python\ndef add(a, b):\n    return a + b\n```\nThis adds two numbers.",
      "我已经修改了配置文件，并重新运行了测试，全部通过。",
      "  Leading spaces, then text.",
      "Trailing newline at the end\n",
      "<think>\nThe user wants a summary.\n</think>\n\nHere is the summary.",
      "Done.",
  };
  int exact = 0;
  for (const std::string& reply : replies) {
    json messages = json::array({{{"role", "system"}, {"content", "You are a coding agent."}},
                                 {{"role", "user"}, {"content", "Please help."}}});
    text::ChatRenderInput first;
    first.messages = &messages;
    std::vector<int32_t> prompt = tok.encodePrompt(tmpl.render(first).value()).value();
    std::vector<int32_t> generated = tok.encode(reply).value();
    messages.push_back({{"role", "assistant"}, {"content", reply}});
    messages.push_back({{"role", "user"}, {"content", "Thanks, next."}});
    std::vector<int32_t> next = tok.encodePrompt(tmpl.render(first).value()).value();
    std::vector<int32_t> before = prompt;
    before.insert(before.end(), generated.begin(), generated.end());
    const bool ok = next.size() >= before.size() && std::equal(before.begin(), before.end(), next.begin());
    size_t common = 0;
    while (common < std::min(before.size(), next.size()) && before[common] == next[common]) ++common;
    exact += ok;
    std::printf("  %-6s reply %zu (%zu bytes): first difference at id %zu of %zu\n", ok ? "exact" : "differ",
                static_cast<size_t>(&reply - replies.data()), reply.size(), common, before.size());
  }
  std::printf("canonical replies re-rendered exactly: %d of %zu\n", exact, replies.size());
}

int run(const Args& args) {
  auto tok = text::Tokenizer::loadFromDir(args.model_dir);
  auto tmpl = text::ChatTemplate::loadFromDir(args.model_dir);
  if (!tok.isOk() || !tmpl.isOk()) {
    std::cerr << "serving_bench: " << (tok.isOk() ? tmpl.status() : tok.status()).toString() << "\n";
    return 2;
  }
  rerenderReport(**tok, *tmpl);
  if (args.rerender_only) return 0;
  engine::ModelLoadOptions load;
  load.prefetch = true;
  load.progress = cli::terminalLoadProgress("loading " + args.model_dir);
  auto model = engine::Model::load(args.model_dir, load);
  if (!model.isOk()) {
    std::cerr << "serving_bench: " << model.status().toString() << "\n";
    return 2;
  }
  engine::BackendOptions bo;
  bo.threads = args.threads;
  bo.block_tokens = 64;
  bo.max_context = 32768;
  bo.num_blocks = 2048;  // 131,072 tokens: the workload never runs out of pool
  auto backend = engine::createCpuBackend(std::move(model).value(), bo);
  if (!backend.isOk()) {
    std::cerr << "serving_bench: " << backend.status().toString() << "\n";
    return 2;
  }
  Workload workload(args, **tok, *tmpl);
  auto phase = [&](const std::string& name, bool with_cache, double rate, int max_queued, int queue_wait_ms,
                   int max_running) {
    std::unique_ptr<cache::PrefixCache> cache;
    if (with_cache) {
      cache = cache::PrefixCache::create((*backend)->latentPool(), nullptr, cache::sha256("serving_bench"), {}).value();
    }
    serving::SchedulerOptions so;
    so.step_tokens = args.step_tokens;
    so.max_running = max_running;
    so.max_queued = max_queued;
    so.max_queue_wait = std::chrono::milliseconds(queue_wait_ms);
    so.eos_token_ids = {};  // random weights: replies run to max_tokens, the same length in every run
    auto scheduler = serving::Scheduler::create(**backend, cache.get(), **tok, so).value();
    RunResult r = workload.run(name, *scheduler, rate);
    scheduler.reset();
    json line = summarize(r, rate);
    std::cout << line.dump() << std::endl;
    return line;
  };
  // Warm-up: fault the weights in, so the first measured run is not charged for it.
  {
    Args warm = args;
    warm.requests = 1;
    Workload w(warm, **tok, *tmpl);
    auto scheduler = serving::Scheduler::create(**backend, nullptr, **tok, {}).value();
    w.run("warm-up", *scheduler, 1.0);
  }
  auto wanted = [&](const char* p) { return ("," + args.phases + ",").find(std::string(",") + p + ",") != std::string::npos; };
  if (wanted("on")) phase("cache_on", true, args.rate, 1000, 600000, 64);
  if (wanted("off")) phase("cache_off", false, args.rate, 1000, 600000, 64);
  // Overload: 4x the rate, at most `overload_max_running` sequences at once
  // and a bounded queue (4 waiting, 10 s wait at most).
  if (wanted("4x")) phase("cache_on_4x", true, args.rate * 4, 4, 10000, args.overload_max_running);
  return 0;
}

}  // namespace
}  // namespace lg::bench

int main(int argc, char** argv) {
  lg::bench::Args args;
  CLI::App app{"serving_bench: the scheduler under an agent workload (docs/benchmarks.md)"};
  app.add_option("--model", args.model_dir, "Model directory (a `latentgate model init` preset)")->required();
  app.add_option("--rate", args.rate, "Arrivals per second (Poisson)");
  app.add_option("--requests", args.requests, "Requests per run");
  app.add_option("--system-tokens", args.system_tokens, "Shared system prompt length");
  app.add_option("--turn-tokens", args.turn_tokens, "User message length");
  app.add_option("--reply-tokens", args.reply_tokens, "Tokens generated per reply");
  app.add_option("--step-tokens", args.step_tokens, "Scheduler step budget");
  app.add_option("--threads", args.threads, "Compute threads (0: all)");
  app.add_option("--seed", args.seed, "Workload seed");
  app.add_flag("--rerender-only", args.rerender_only, "Only report chat-template re-rendering of replies");
  app.add_option("--phases", args.phases, "Runs: any of on,off,4x");
  app.add_option("--overload-max-running", args.overload_max_running, "Sequences at once in the 4x run");
  CLI11_PARSE(app, argc, argv);
  return lg::bench::run(args);
}
