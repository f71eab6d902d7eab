#include "common/logging.h"

#include <chrono>
#include <ctime>
#include <map>
#include <mutex>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>


namespace lg {
namespace {

// Writes `s` as the body of a JSON string (without quotes).
void appendJsonEscaped(std::string_view s, spdlog::memory_buf_t& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out.append(std::string_view("\\\"")); break;
      case '\\': out.append(std::string_view("\\\\")); break;
      case '\n': out.append(std::string_view("\\n")); break;
      case '\r': out.append(std::string_view("\\r")); break;
      case '\t': out.append(std::string_view("\\t")); break;
      default:
        if (c < 0x20) {
          const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
          out.append(esc, esc + sizeof esc);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
}

// {"ts":"2026-11-30T03:26:28.123Z","level":"info","logger":"engine","msg":"..."}
class JsonLinesFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    using namespace std::chrono;
    const auto t = msg.time.time_since_epoch();
    const auto secs = duration_cast<seconds>(t);
    const auto millis = duration_cast<milliseconds>(t - secs).count();
    std::time_t tt = static_cast<std::time_t>(secs.count());
    std::tm tm{};
    gmtime_r(&tt, &tm);
    char ts[40];
    size_t n = std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    n += static_cast<size_t>(std::snprintf(ts + n, sizeof ts - n, ".%03dZ", static_cast<int>(millis)));
    dest.append(std::string_view("{\"ts\":\""));
    dest.append(ts, ts + n);
    dest.append(std::string_view("\",\"level\":\""));
    const auto level = spdlog::level::to_string_view(msg.level);
    dest.append(level.data(), level.data() + level.size());
    dest.append(std::string_view("\",\"logger\":\""));
    appendJsonEscaped(std::string_view(msg.logger_name.data(), msg.logger_name.size()), dest);
    dest.append(std::string_view("\",\"msg\":\""));
    appendJsonEscaped(std::string_view(msg.payload.data(), msg.payload.size()), dest);
    dest.append(std::string_view("\"}\n"));
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonLinesFormatter>();
  }
};

struct Registry {
  std::mutex mu;
  spdlog::sink_ptr sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  spdlog::level::level_enum level = spdlog::level::info;
  bool json = false;
  std::map<std::string, std::shared_ptr<spdlog::logger>, std::less<>> loggers;
};

Registry& registry() {
  static Registry* r = new Registry();  // leaked: loggers outlive static destructors
  return *r;
}

void applyFormat(Registry& r) {
  if (r.json) {
    r.sink->set_formatter(std::make_unique<JsonLinesFormatter>());
  } else {
    r.sink->set_formatter(std::make_unique<spdlog::pattern_formatter>("%Y-%m-%d %H:%M:%S.%e %^%-5l%$ [%n] %v"));
  }
}

}  // namespace

void initLogging(const LogOptions& options) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.level = spdlog::level::from_str(options.level);
  r.json = options.format == LogFormat::kJson;
  applyFormat(r);
  for (auto& [name, logger] : r.loggers) logger->set_level(r.level);
}

spdlog::logger* componentLogger(std::string_view component) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.loggers.find(component);
  if (it != r.loggers.end()) return it->second.get();
  if (r.loggers.empty()) applyFormat(r);
  auto logger = std::make_shared<spdlog::logger>(std::string(component), r.sink);
  logger->set_level(r.level);
  logger->flush_on(spdlog::level::warn);
  spdlog::logger* raw = logger.get();
  r.loggers.emplace(std::string(component), std::move(logger));
  return raw;
}

}  // namespace lg
