#include "config/config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <limits>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <variant>

#include <nlohmann/json.hpp>

#include "billing/settings_json.h"
#include "common/file_util.h"
#include "common/secret_strength.h"
#include "common/team_id.h"
#include "common/url_redact.h"

extern char** environ;

namespace lg {
namespace {

using json = nlohmann::json;
using FieldRef = std::variant<std::string*, int*, int64_t*, bool*, LogFormat*, LatentDTypeSetting*,
                              PrefillAttentionSetting*, BackendSetting*, StoredDTypeSetting*, RestorePolicySetting*, FingerprintSetting*, KvEventsEncodingSetting*,
                              SharedNamespaceGrants*, PriceTableSetting*, BudgetSetting*>;

// The names of each enum setting, indexed by the enumerator's value: the one
// list that parsing, validation messages and `config show` use.
constexpr std::array<std::string_view, 2> kLogFormatNames = {"text", "json"};
constexpr std::array<std::string_view, 2> kLatentDTypeNames = {"f32", "bf16"};
constexpr std::array<std::string_view, 3> kPrefillAttentionNames = {"auto", "absorbed", "standard"};
constexpr std::array<std::string_view, 2> kBackendNames = {"cpu", "cuda"};
constexpr std::array<std::string_view, 4> kStoredDTypeNames = {"pool", "f32", "bf16", "int8"};
constexpr std::array<std::string_view, 3> kRestorePolicyNames = {"auto", "always", "never"};
constexpr std::array<std::string_view, 2> kFingerprintNames = {"sampled", "full"};
constexpr std::array<std::string_view, 2> kKvEventsEncodingNames = {"array", "map"};

std::span<const std::string_view> enumNames(LogFormat) { return kLogFormatNames; }
std::span<const std::string_view> enumNames(LatentDTypeSetting) { return kLatentDTypeNames; }
std::span<const std::string_view> enumNames(PrefillAttentionSetting) { return kPrefillAttentionNames; }
std::span<const std::string_view> enumNames(BackendSetting) { return kBackendNames; }
std::span<const std::string_view> enumNames(StoredDTypeSetting) { return kStoredDTypeNames; }
std::span<const std::string_view> enumNames(RestorePolicySetting) { return kRestorePolicyNames; }
std::span<const std::string_view> enumNames(FingerprintSetting) { return kFingerprintNames; }
std::span<const std::string_view> enumNames(KvEventsEncodingSetting) { return kKvEventsEncodingNames; }

struct Field {
  std::string_view path;
  FieldRef (*ref)(Config&);
};

#define LG_FIELD(path, member) \
  Field { path, [](Config& c) -> FieldRef { return &c.member; } }

// The single list of configurable fields: file keys, env names and flags all
// derive from these paths.
const std::array kFields = {
    LG_FIELD("data_dir", data_dir),
    LG_FIELD("admin_key", admin_key),
    LG_FIELD("log.level", log.level),
    LG_FIELD("log.format", log.format),
    LG_FIELD("server.listen", server.listen),
    LG_FIELD("server.tls_cert", server.tls_cert),
    LG_FIELD("server.tls_key", server.tls_key),
    LG_FIELD("server.plain_http", server.plain_http),
    LG_FIELD("server.io_threads", server.io_threads),
    LG_FIELD("server.max_connections", server.max_connections),
    LG_FIELD("server.max_body_bytes", server.max_body_bytes),
    LG_FIELD("server.default_max_tokens", server.default_max_tokens),
    LG_FIELD("server.stored_response_ttl_s", server.stored_response_ttl_s),
    LG_FIELD("server.max_stored_response_bytes", server.max_stored_response_bytes),
    LG_FIELD("server.blocking_threads", server.blocking_threads),
    LG_FIELD("server.blocking_max_queued", server.blocking_max_queued),
    LG_FIELD("server.blocking_max_queued_per_team", server.blocking_max_queued_per_team),
    LG_FIELD("server.dashboard_sessions_per_key", server.dashboard_sessions_per_key),
    LG_FIELD("server.dashboard_sign_in_failures_per_minute", server.dashboard_sign_in_failures_per_minute),
    LG_FIELD("server.dashboard_sign_ins_per_key_per_minute", server.dashboard_sign_ins_per_key_per_minute),
    LG_FIELD("server.header_timeout_ms", server.header_timeout_ms),
    LG_FIELD("server.idle_timeout_ms", server.idle_timeout_ms),
    LG_FIELD("server.body_timeout_ms", server.body_timeout_ms),
    LG_FIELD("server.request_timeout_ms", server.request_timeout_ms),
    LG_FIELD("server.max_control_body_bytes", server.max_control_body_bytes),
    LG_FIELD("server.max_inflight_body_bytes", server.max_inflight_body_bytes),
    LG_FIELD("server.max_connections_per_address", server.max_connections_per_address),
    LG_FIELD("server.reserved_connections", server.reserved_connections),
    LG_FIELD("server.pressure_idle_timeout_ms", server.pressure_idle_timeout_ms),
    LG_FIELD("server.metrics_token", server.metrics_token),
    LG_FIELD("engine.backend", engine.backend),
    LG_FIELD("engine.model_dir", engine.model_dir),
    LG_FIELD("engine.threads", engine.threads),
    LG_FIELD("engine.max_context", engine.max_context),
    LG_FIELD("engine.latent_dtype", engine.latent_dtype),
    LG_FIELD("engine.pool_blocks", engine.pool_blocks),
    LG_FIELD("engine.max_batch_tokens", engine.max_batch_tokens),
    LG_FIELD("engine.prefill_attention", engine.prefill_attention),
    LG_FIELD("cache.enabled", cache.enabled),
    LG_FIELD("cache.block_tokens", cache.block_tokens),
    LG_FIELD("cache.tier0_budget_bytes", cache.tier0_budget_bytes),
    LG_FIELD("cache.disk_path", cache.disk_path),
    LG_FIELD("cache.secret_file", cache.secret_file),
    LG_FIELD("cache.disk_max_bytes", cache.disk_max_bytes),
    LG_FIELD("cache.disk_ttl_seconds", cache.disk_ttl_seconds),
    LG_FIELD("cache.disk_verify_checksums", cache.disk_verify_checksums),
    LG_FIELD("cache.stored_dtype", cache.stored_dtype),
    LG_FIELD("cache.write_through_hits", cache.write_through_hits),
    LG_FIELD("cache.write_back_queue_blocks", cache.write_back_queue_blocks),
    LG_FIELD("cache.write_back_batch_blocks", cache.write_back_batch_blocks),
    LG_FIELD("cache.restore_policy", cache.restore_policy),
    LG_FIELD("cache.in_flight_wait_ms", cache.in_flight_wait_ms),
    LG_FIELD("cache.reply_ids_max_bytes", cache.reply_ids_max_bytes),
    LG_FIELD("cache.reply_ids_ttl_seconds", cache.reply_ids_ttl_seconds),
    LG_FIELD("cache.prefix_breakers_max_bytes", cache.prefix_breakers_max_bytes),
    LG_FIELD("cache.prefix_breakers_max_prompt_tokens", cache.prefix_breakers_max_prompt_tokens),
    LG_FIELD("cache.prefix_breakers_min_common_tokens", cache.prefix_breakers_min_common_tokens),
    LG_FIELD("cache.io_threads", cache.io_threads),
    LG_FIELD("cache.fingerprint", cache.fingerprint),
    LG_FIELD("cache.identity_check_seconds", cache.identity_check_seconds),
    LG_FIELD("cache.mrc_sampling_ppm", cache.mrc_sampling_ppm),
    LG_FIELD("cache.mrc_max_samples", cache.mrc_max_samples),
    LG_FIELD("cache.evicted_blocks_tracked", cache.evicted_blocks_tracked),
    LG_FIELD("cache.shared_namespaces", cache.shared_namespaces),
    LG_FIELD("cache.kv_events.endpoint", cache.kv_events.endpoint),
    LG_FIELD("cache.kv_events.bind", cache.kv_events.bind),
    LG_FIELD("cache.kv_events.replay_endpoint", cache.kv_events.replay_endpoint),
    LG_FIELD("cache.kv_events.topic", cache.kv_events.topic),
    LG_FIELD("cache.kv_events.encoding", cache.kv_events.encoding),
    LG_FIELD("cache.kv_events.buffer_steps", cache.kv_events.buffer_steps),
    LG_FIELD("cache.kv_events.max_queue_events", cache.kv_events.max_queue_events),
    LG_FIELD("cache.kv_events.hwm", cache.kv_events.hwm),
    LG_FIELD("cache.kv_events.reannounce_interval_ms", cache.kv_events.reannounce_interval_ms),
    LG_FIELD("serving.step_tokens", serving.step_tokens),
    LG_FIELD("serving.max_running", serving.max_running),
    LG_FIELD("serving.max_queued", serving.max_queued),
    LG_FIELD("serving.max_queue_wait_ms", serving.max_queue_wait_ms),
    LG_FIELD("serving.output_reservation_tokens", serving.output_reservation_tokens),
    LG_FIELD("serving.max_stop_strings", serving.max_stop_strings),
    LG_FIELD("limits.key_requests_per_minute", limits.key_requests_per_minute),
    LG_FIELD("limits.key_tokens_per_minute", limits.key_tokens_per_minute),
    LG_FIELD("limits.team_requests_per_minute", limits.team_requests_per_minute),
    LG_FIELD("limits.team_tokens_per_minute", limits.team_tokens_per_minute),
    LG_FIELD("limits.key_usage_queries_per_minute", limits.key_usage_queries_per_minute),
    LG_FIELD("limits.redis_url", limits.redis_url),
    LG_FIELD("limits.redis_connect_timeout_ms", limits.redis_connect_timeout_ms),
    LG_FIELD("limits.redis_command_timeout_ms", limits.redis_command_timeout_ms),
    LG_FIELD("limits.redis_retry_ms", limits.redis_retry_ms),
    LG_FIELD("limits.redis_reservation_ttl_s", limits.redis_reservation_ttl_s),
    LG_FIELD("limits.redis_fallback_replicas", limits.redis_fallback_replicas),
    LG_FIELD("billing.prices", billing.prices),
    LG_FIELD("billing.key_budget", billing.key_budget),
    LG_FIELD("billing.team_budget", billing.team_budget),
    LG_FIELD("billing.idempotency_ttl_s", billing.idempotency_ttl_s),
    LG_FIELD("billing.postgres_url", billing.postgres_url),
    LG_FIELD("billing.postgres_drain_batch", billing.postgres_drain_batch),
    LG_FIELD("billing.postgres_drain_interval_ms", billing.postgres_drain_interval_ms),
    LG_FIELD("billing.postgres_retry_min_ms", billing.postgres_retry_min_ms),
    LG_FIELD("billing.postgres_retry_max_ms", billing.postgres_retry_max_ms),
    LG_FIELD("billing.postgres_shutdown_drain_ms", billing.postgres_shutdown_drain_ms),
    LG_FIELD("billing.control_sync_interval_ms", billing.control_sync_interval_ms),
};
#undef LG_FIELD

const Field* findField(std::string_view path) {
  for (const Field& f : kFields) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

bool isSection(std::string_view path) {
  for (const Field& f : kFields) {
    if (f.path.size() > path.size() && f.path.substr(0, path.size()) == path && f.path[path.size()] == '.') {
      return true;
    }
  }
  return false;
}

Status parseInt(const std::string& path, const std::string& text, int& out) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    return invalidArgument(path + ": expected an integer, got " + quoteValue(text));
  }
  out = v;
  return Status::ok();
}

// A 64-bit integer, optionally with a binary size suffix (KiB, MiB, GiB, TiB).
Status parseInt64(const std::string& path, const std::string& text, int64_t& out) {
  static constexpr std::array<std::pair<std::string_view, int>, 4> kSuffixes = {
      {{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}}};
  std::string_view digits = text;
  int shift = 0;
  for (const auto& [suffix, bits] : kSuffixes) {
    if (digits.size() > suffix.size() && digits.substr(digits.size() - suffix.size()) == suffix) {
      digits.remove_suffix(suffix.size());
      shift = bits;
      break;
    }
  }
  int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty()) {
    return invalidArgument(path + ": expected an integer (optionally with KiB, MiB, GiB or TiB), got " +
                           quoteValue(text));
  }
  if (shift > 0 && (v > (std::numeric_limits<int64_t>::max() >> shift) || v < (std::numeric_limits<int64_t>::min() >> shift))) {
    return invalidArgument(path + ": " + quoteValue(text) + " is out of range");
  }
  out = v * (int64_t{1} << shift);
  return Status::ok();
}

Status parseBool(const std::string& path, const std::string& text, bool& out) {
  if (text == "true" || text == "1") { out = true; return Status::ok(); }
  if (text == "false" || text == "0") { out = false; return Status::ok(); }
  return invalidArgument(path + ": expected true or false, got " + quoteValue(text));
}

template <typename E>
Status parseEnum(const std::string& path, const std::string& text, E& out) {
  const std::span<const std::string_view> names = enumNames(E{});
  for (size_t i = 0; i < names.size(); ++i) {
    if (text == names[i]) {
      out = static_cast<E>(i);
      return Status::ok();
    }
  }
  std::string expected;
  for (size_t i = 0; i < names.size(); ++i) expected += (i == 0 ? "" : ", ") + std::string(names[i]);
  return invalidArgument(path + ": expected one of " + expected + "; got " + quoteValue(text));
}

template <typename E>
std::string_view enumName(E value) {
  return enumNames(value)[static_cast<size_t>(value)];
}

// {"namespace": ["team", ...], ...}. Whether the names are valid is
// validateConfig's part.
Status parseGrants(const std::string& path, const json& value, SharedNamespaceGrants& out) {
  const std::string expected = R"(expected an object of lists of team ids, {"shared-name": ["team-a", ...]}, got )";
  if (!value.is_object()) return invalidArgument(path + ": " + expected + value.dump());
  SharedNamespaceGrants grants;
  for (const auto& [name, teams] : value.items()) {
    if (!teams.is_array()) return invalidArgument(path + "." + name + ": " + expected + teams.dump());
    std::vector<std::string>& list = grants[name];
    for (const json& team : teams) {
      if (!team.is_string()) return invalidArgument(path + "." + name + ": expected team ids (strings), got " + team.dump());
      list.push_back(team.get<std::string>());
    }
  }
  out = std::move(grants);
  return Status::ok();
}

// billing.prices and the budgets are read by billing's own codecs
// (billing/settings_json.h), the ones its stored rows and the admin API use;
// they take JSON text, so a file's value is written back out for them.
Status readBillingSetting(const std::string& path, std::string_view json_text, PriceTableSetting& out) {
  LG_ASSIGN_OR_RETURN(out, parsePriceTable(json_text, path));
  return Status::ok();
}
Status readBillingSetting(const std::string& path, std::string_view json_text, BudgetSetting& out) {
  LG_ASSIGN_OR_RETURN(out, parseBudget(json_text, path));
  return Status::ok();
}

Status setFromString(const Field& field, const std::string& value, Config& config) {
  const std::string path(field.path);
  return std::visit(
      [&](auto* target) -> Status {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, std::string>) {
          *target = value;
          return Status::ok();
        } else if constexpr (std::is_same_v<T, int>) {
          return parseInt(path, value, *target);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return parseInt64(path, value, *target);
        } else if constexpr (std::is_same_v<T, bool>) {
          return parseBool(path, value, *target);
        } else if constexpr (std::is_same_v<T, SharedNamespaceGrants>) {
          // In the environment or a flag: the same JSON object as in a file.
          const json parsed = json::parse(value, nullptr, /*allow_exceptions=*/false);
          if (parsed.is_discarded()) return invalidArgument(path + ": expected a JSON object, got " + quoteValue(value));
          return parseGrants(path, parsed, *target);
        } else if constexpr (std::is_same_v<T, PriceTableSetting> || std::is_same_v<T, BudgetSetting>) {
          // In the environment or a flag: the same JSON object as in a file.
          const json parsed = json::parse(value, nullptr, /*allow_exceptions=*/false);
          if (parsed.is_discarded()) return invalidArgument(path + ": expected a JSON object, got " + quoteValue(value));
          return readBillingSetting(path, value, *target);
        } else {
          return parseEnum(path, value, *target);
        }
      },
      field.ref(config));
}

Status setFromJson(const Field& field, const json& value, Config& config) {
  const std::string path(field.path);
  FieldRef ref = field.ref(config);
  if (auto* i = std::get_if<int*>(&ref)) {
    if (!value.is_number_integer()) return invalidArgument(path + ": expected an integer, got " + value.dump());
    const auto v = value.get<int64_t>();
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      return invalidArgument(path + ": " + value.dump() + " is out of range");
    }
    **i = static_cast<int>(v);
    return Status::ok();
  }
  if (auto* l = std::get_if<int64_t*>(&ref)) {
    if (value.is_number_integer()) {
      if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return invalidArgument(path + ": " + value.dump() + " is out of range");
      }
      **l = value.get<int64_t>();
      return Status::ok();
    }
    if (!value.is_string()) return invalidArgument(path + ": expected an integer or a size string, got " + value.dump());
    return parseInt64(path, value.get<std::string>(), **l);
  }
  if (auto* b = std::get_if<bool*>(&ref)) {
    if (!value.is_boolean()) return invalidArgument(path + ": expected true or false, got " + value.dump());
    **b = value.get<bool>();
    return Status::ok();
  }
  if (auto* g = std::get_if<SharedNamespaceGrants*>(&ref)) return parseGrants(path, value, **g);
  if (auto* p = std::get_if<PriceTableSetting*>(&ref)) return readBillingSetting(path, value.dump(), **p);
  if (auto* b = std::get_if<BudgetSetting*>(&ref)) return readBillingSetting(path, value.dump(), **b);
  if (!value.is_string()) return invalidArgument(path + ": expected a string, got " + value.dump());
  return setFromString(field, value.get<std::string>(), config);
}

Status applyObject(const json& object, const std::string& prefix, Config& config) {
  for (const auto& [key, value] : object.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (const Field* f = findField(path)) {
      LG_RETURN_IF_ERROR(setFromJson(*f, value, config));
    } else if (isSection(path) && value.is_object()) {
      LG_RETURN_IF_ERROR(applyObject(value, path, config));
    } else {
      return invalidArgument("unknown field " + quoteValue(path));
    }
  }
  return Status::ok();
}

std::string envName(std::string_view path) {
  std::string name = "LATENTGATE_";
  for (char c : path) name += (c == '.') ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

bool parseListen(const std::string& listen) {
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  int port = -1;
  const std::string p = listen.substr(colon + 1);
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  return ec == std::errc() && end == p.data() + p.size() && port >= 0 && port <= 65535;
}

}  // namespace

Status applyConfigText(const std::string& text, const std::string& origin, Config& config) {
  json doc;
  try {
    doc = json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {
    return invalidArgument(origin + ": " + e.what());
  }
  if (!doc.is_object()) return invalidArgument(origin + ": the top level must be a JSON object");
  return applyObject(doc, "", config).withContext(origin);
}

Status setConfigField(const std::string& path, const std::string& value, Config& config) {
  const Field* f = findField(path);
  if (f == nullptr) return invalidArgument("unknown field " + quoteValue(path));
  return setFromString(*f, value, config);
}

// cache.kv_events: ZMQ endpoints as zmq_bind/zmq_connect take them, and bounds
// that keep the publisher's memory bounded.
static Status validateKvEvents(const KvEventsOptions& k) {
  const auto endpointOk = [](const std::string& e) {
    for (const char* scheme : {"tcp://", "ipc://", "inproc://"}) {
      if (e.rfind(scheme, 0) == 0 && e.size() > std::string_view(scheme).size()) return true;
    }
    return false;
  };
  if (!k.endpoint.empty() && !endpointOk(k.endpoint)) {
    return invalidArgument("cache.kv_events.endpoint: expected tcp://HOST:PORT, ipc://PATH or inproc://NAME, got " +
                           quoteValue(k.endpoint));
  }
  if (!k.replay_endpoint.empty()) {
    if (k.endpoint.empty()) return invalidArgument("cache.kv_events.replay_endpoint needs cache.kv_events.endpoint");
    if (!endpointOk(k.replay_endpoint)) {
      return invalidArgument("cache.kv_events.replay_endpoint: expected tcp://HOST:PORT, ipc://PATH or inproc://NAME, got " +
                             quoteValue(k.replay_endpoint));
    }
    if (k.replay_endpoint == k.endpoint) {
      return invalidArgument("cache.kv_events.replay_endpoint must differ from cache.kv_events.endpoint");
    }
  }
  if (k.buffer_steps < 0 || k.buffer_steps > 1000000) {
    return invalidArgument("cache.kv_events.buffer_steps: expected 0..1000000, got " + std::to_string(k.buffer_steps));
  }
  if (k.max_queue_events < 1 || k.max_queue_events > 10000000) {
    return invalidArgument("cache.kv_events.max_queue_events: expected 1..10000000, got " +
                           std::to_string(k.max_queue_events));
  }
  if (k.hwm < 0) return invalidArgument("cache.kv_events.hwm: expected >= 0 (0 = no limit), got " + std::to_string(k.hwm));
  if (k.reannounce_interval_ms != 0 && (k.reannounce_interval_ms < 100 || k.reannounce_interval_ms > 3600000)) {
    return invalidArgument("cache.kv_events.reannounce_interval_ms: expected 0 (never) or 100..3600000, got " +
                           std::to_string(k.reannounce_interval_ms));
  }
  return Status::ok();
}

Status validateConfig(const Config& c) {
  if (c.data_dir.empty()) return invalidArgument("data_dir: must not be empty");
  static constexpr std::array kLevels = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  if (std::find(kLevels.begin(), kLevels.end(), c.log.level) == kLevels.end()) {
    return invalidArgument("log.level: expected one of trace, debug, info, warn, error, critical, off; got " +
                           quoteValue(c.log.level));
  }
  if (!parseListen(c.server.listen)) {
    return invalidArgument("server.listen: expected HOST:PORT with a port in 0..65535, got " +
                           quoteValue(c.server.listen));
  }
  if (c.server.tls_cert.empty() != c.server.tls_key.empty()) {
    return invalidArgument("server.tls_cert and server.tls_key: set both or neither");
  }
  if (c.server.io_threads < 1 || c.server.io_threads > 256) {
    return invalidArgument("server.io_threads: expected 1..256, got " + std::to_string(c.server.io_threads));
  }
  if (c.server.plain_http && !c.server.tls_cert.empty()) {
    return invalidArgument("server.plain_http: true, but server.tls_cert is set: choose plain HTTP or TLS");
  }
  if (c.server.max_connections < 1 || c.server.max_connections > 1000000) {
    return invalidArgument("server.max_connections: expected 1..1000000, got " +
                           std::to_string(c.server.max_connections));
  }
  if (c.server.default_max_tokens < 1 || c.server.default_max_tokens > (1 << 20)) {
    return invalidArgument("server.default_max_tokens: expected 1..1048576, got " +
                           std::to_string(c.server.default_max_tokens));
  }
  if (c.server.stored_response_ttl_s < 1 || c.server.stored_response_ttl_s > 10 * 365 * 24 * 3600) {
    return invalidArgument("server.stored_response_ttl_s: expected 1..315360000 (10 years), got " +
                           std::to_string(c.server.stored_response_ttl_s));
  }
  if (c.server.max_stored_response_bytes < 1024 || c.server.max_stored_response_bytes > (int64_t{1} << 30)) {
    return invalidArgument("server.max_stored_response_bytes: expected 1KiB..1GiB, got " +
                           std::to_string(c.server.max_stored_response_bytes));
  }
  if (c.server.blocking_threads < 1 || c.server.blocking_threads > 256) {
    return invalidArgument("server.blocking_threads: expected 1..256, got " + std::to_string(c.server.blocking_threads));
  }
  if (c.server.blocking_max_queued < 1 || c.server.blocking_max_queued > 1000000) {
    return invalidArgument("server.blocking_max_queued: expected 1..1000000, got " +
                           std::to_string(c.server.blocking_max_queued));
  }
  if (c.server.blocking_max_queued_per_team < 1 || c.server.blocking_max_queued_per_team > c.server.blocking_max_queued) {
    return invalidArgument("server.blocking_max_queued_per_team: expected 1..server.blocking_max_queued (" +
                           std::to_string(c.server.blocking_max_queued) + "), got " +
                           std::to_string(c.server.blocking_max_queued_per_team));
  }
  if (c.server.dashboard_sessions_per_key < 1 || c.server.dashboard_sessions_per_key > 1024) {
    return invalidArgument("server.dashboard_sessions_per_key: expected 1..1024, got " +
                           std::to_string(c.server.dashboard_sessions_per_key));
  }
  for (const auto& [name, value] :
       {std::pair{"dashboard_sign_in_failures_per_minute", c.server.dashboard_sign_in_failures_per_minute},
        std::pair{"dashboard_sign_ins_per_key_per_minute", c.server.dashboard_sign_ins_per_key_per_minute}}) {
    if (value < 0 || value > 1000000) {
      return invalidArgument(std::string("server.") + name + ": expected 0..1000000 (0 = unlimited), got " +
                             std::to_string(value));
    }
  }
  if (c.billing.idempotency_ttl_s < 1 || c.billing.idempotency_ttl_s > 10 * 365 * 24 * 3600) {
    return invalidArgument("billing.idempotency_ttl_s: expected 1..315360000 (10 years), got " +
                           std::to_string(c.billing.idempotency_ttl_s));
  }
  if (!c.billing.postgres_url.empty()) {
    // The message shows the URL with its password hidden, never the password.
    const std::string& url = c.billing.postgres_url;
    const bool is_url = url.starts_with("postgresql://") || url.starts_with("postgres://");
    if (!is_url && url.find('=') == std::string::npos) {
      return invalidArgument("billing.postgres_url: expected postgresql://... or libpq's key=value form, got " +
                             quoteValue(redactUrlPassword(url)));
    }
  }
  for (const auto& [name, value, lo, hi] :
       {std::tuple{"postgres_drain_batch", c.billing.postgres_drain_batch, 1, 100000},
        std::tuple{"postgres_drain_interval_ms", c.billing.postgres_drain_interval_ms, 10, 60000},
        std::tuple{"postgres_retry_min_ms", c.billing.postgres_retry_min_ms, 10, 600000},
        std::tuple{"postgres_retry_max_ms", c.billing.postgres_retry_max_ms, c.billing.postgres_retry_min_ms, 3600000},
        std::tuple{"postgres_shutdown_drain_ms", c.billing.postgres_shutdown_drain_ms, 0, 600000},
        std::tuple{"control_sync_interval_ms", c.billing.control_sync_interval_ms, 10, 60000}}) {
    if (value < lo || value > hi) {
      return invalidArgument(std::string("billing.") + name + ": expected " + std::to_string(lo) + ".." +
                             std::to_string(hi) + (std::string_view(name) == "postgres_retry_max_ms" ?
                             " (from billing.postgres_retry_min_ms)" : "") + ", got " + std::to_string(value));
    }
  }
  // A secret: the message gives its length, never its text.
  if (!c.server.metrics_token.empty() && (c.server.metrics_token.size() < 16 || c.server.metrics_token.size() > 4096)) {
    return invalidArgument("server.metrics_token: expected 16..4096 characters, got " +
                           std::to_string(c.server.metrics_token.size()));
  }
  // Chosen secrets must be hard to guess (common/secret_strength.h): the
  // server refuses to start rather than run behind a guessable admin key.
  if (!c.server.metrics_token.empty()) LG_RETURN_IF_ERROR(checkSecretStrength(c.server.metrics_token, "server.metrics_token"));
  if (!c.admin_key.empty()) LG_RETURN_IF_ERROR(checkSecretStrength(c.admin_key, "admin_key (LATENTGATE_ADMIN_KEY)"));
  if (c.server.max_body_bytes < 1024 || c.server.max_body_bytes > (int64_t{1} << 32)) {
    return invalidArgument("server.max_body_bytes: expected 1KiB..4GiB, got " +
                           std::to_string(c.server.max_body_bytes));
  }
  // Bounds only: a value above another limit is cut to it where it applies
  // (a route's body limit to max_body_bytes, the reserve to a quarter of
  // max_connections, the pressure wait to idle_timeout_ms), so that
  // changing one option never makes another one's default an error.
  if (c.server.max_control_body_bytes < 1024 || c.server.max_control_body_bytes > (int64_t{1} << 32)) {
    return invalidArgument("server.max_control_body_bytes: expected 1KiB..4GiB, got " +
                           std::to_string(c.server.max_control_body_bytes));
  }
  // At least one body of the largest kind must fit, or such a request could
  // never run.
  if (c.server.max_inflight_body_bytes < c.server.max_body_bytes ||
      c.server.max_inflight_body_bytes > (int64_t{1} << 40)) {
    return invalidArgument("server.max_inflight_body_bytes: expected server.max_body_bytes (" +
                           std::to_string(c.server.max_body_bytes) + ")..1TiB, got " +
                           std::to_string(c.server.max_inflight_body_bytes));
  }
  if (c.server.max_connections_per_address < 0 || c.server.max_connections_per_address > 1000000) {
    return invalidArgument("server.max_connections_per_address: expected 0 (no cap)..1000000, got " +
                           std::to_string(c.server.max_connections_per_address));
  }
  if (c.server.reserved_connections < 0 || c.server.reserved_connections > 1000000) {
    return invalidArgument("server.reserved_connections: expected 0..1000000, got " +
                           std::to_string(c.server.reserved_connections));
  }
  if (c.server.pressure_idle_timeout_ms < 1) {
    return invalidArgument("server.pressure_idle_timeout_ms: expected >= 1, got " +
                           std::to_string(c.server.pressure_idle_timeout_ms));
  }
  for (const auto& [name, value] : {std::pair{"server.header_timeout_ms", c.server.header_timeout_ms},
                                    std::pair{"server.idle_timeout_ms", c.server.idle_timeout_ms},
                                    std::pair{"server.body_timeout_ms", c.server.body_timeout_ms},
                                    std::pair{"server.request_timeout_ms", c.server.request_timeout_ms}}) {
    if (value < 1) return invalidArgument(std::string(name) + ": expected >= 1, got " + std::to_string(value));
  }
  if (c.engine.threads < 0 || c.engine.threads > 1024) {
    return invalidArgument("engine.threads: expected 0..1024 (0 = all cores), got " +
                           std::to_string(c.engine.threads));
  }
  if (c.engine.max_context < 0) {
    return invalidArgument("engine.max_context: expected >= 0 (0 = the model's), got " +
                           std::to_string(c.engine.max_context));
  }
  if (c.engine.pool_blocks < 0 || c.engine.pool_blocks > (int64_t{1} << 30)) {
    return invalidArgument("engine.pool_blocks: expected 0..1073741824 (0 = 4 sequences of max_context), got " +
                           std::to_string(c.engine.pool_blocks));
  }
  if (c.engine.max_batch_tokens < 1 || c.engine.max_batch_tokens > (int64_t{1} << 20)) {
    return invalidArgument("engine.max_batch_tokens: expected 1..1048576, got " +
                           std::to_string(c.engine.max_batch_tokens));
  }
  // Hits are counted in whole blocks; with blocks of a few tokens, hit counts
  // (which a client sees in its usage) would reveal others' prompts nearly
  // token by token within a shared namespace.
  if (c.cache.block_tokens < 16 || c.cache.block_tokens > 4096) {
    return invalidArgument("cache.block_tokens: expected 16..4096, got " + std::to_string(c.cache.block_tokens));
  }
  if (c.cache.tier0_budget_bytes < 0) {
    return invalidArgument("cache.tier0_budget_bytes: expected >= 0 (0 = the whole pool), got " +
                           std::to_string(c.cache.tier0_budget_bytes));
  }
  if (c.cache.disk_max_bytes < (int64_t{1} << 20)) {
    return invalidArgument("cache.disk_max_bytes: expected at least 1MiB, got " + std::to_string(c.cache.disk_max_bytes));
  }
  if (c.cache.disk_ttl_seconds < 0) {
    return invalidArgument("cache.disk_ttl_seconds: expected >= 0 (0 = never expire), got " +
                           std::to_string(c.cache.disk_ttl_seconds));
  }
  if (c.cache.mrc_sampling_ppm < 0 || c.cache.mrc_sampling_ppm > 1000000) {
    return invalidArgument("cache.mrc_sampling_ppm: expected 0 (per tier) or 1..1000000 parts per million, got " +
                           std::to_string(c.cache.mrc_sampling_ppm));
  }
  if (c.cache.evicted_blocks_tracked < 0 || c.cache.evicted_blocks_tracked > 67108864) {
    return invalidArgument("cache.evicted_blocks_tracked: expected 0 (none) up to 67108864, got " +
                           std::to_string(c.cache.evicted_blocks_tracked));
  }
  if (c.cache.mrc_max_samples < 0 || c.cache.mrc_max_samples > 16777216) {
    return invalidArgument("cache.mrc_max_samples: expected 0 (no curves) or 1..16777216, got " +
                           std::to_string(c.cache.mrc_max_samples));
  }
  if (c.cache.write_through_hits < -1) {
    return invalidArgument("cache.write_through_hits: expected >= -1 (-1 = never, 0 = at once), got " +
                           std::to_string(c.cache.write_through_hits));
  }
  if (c.cache.write_back_queue_blocks < 1 || c.cache.write_back_queue_blocks > 1000000) {
    return invalidArgument("cache.write_back_queue_blocks: expected 1..1000000, got " +
                           std::to_string(c.cache.write_back_queue_blocks));
  }
  if (c.cache.write_back_batch_blocks < 1 || c.cache.write_back_batch_blocks > 4096) {
    return invalidArgument("cache.write_back_batch_blocks: expected 1..4096, got " +
                           std::to_string(c.cache.write_back_batch_blocks));
  }
  if (c.cache.reply_ids_max_bytes < 0) {
    return invalidArgument("cache.reply_ids_max_bytes: expected >= 0 (0 = keep no reply ids), got " +
                           std::to_string(c.cache.reply_ids_max_bytes));
  }
  if (c.cache.reply_ids_ttl_seconds < 0) {
    return invalidArgument("cache.reply_ids_ttl_seconds: expected >= 0 (0 = never expire), got " +
                           std::to_string(c.cache.reply_ids_ttl_seconds));
  }
  if (c.cache.prefix_breakers_max_bytes < 0) {
    return invalidArgument("cache.prefix_breakers_max_bytes: expected >= 0 (0 = off), got " +
                           std::to_string(c.cache.prefix_breakers_max_bytes));
  }
  if (c.cache.prefix_breakers_max_prompt_tokens < 64 || c.cache.prefix_breakers_max_prompt_tokens > 1'048'576) {
    return invalidArgument("cache.prefix_breakers_max_prompt_tokens: expected 64..1048576, got " +
                           std::to_string(c.cache.prefix_breakers_max_prompt_tokens));
  }
  if (c.cache.prefix_breakers_min_common_tokens < 16 ||
      c.cache.prefix_breakers_min_common_tokens > c.cache.prefix_breakers_max_prompt_tokens) {
    return invalidArgument("cache.prefix_breakers_min_common_tokens: expected 16..cache.prefix_breakers_max_prompt_tokens"
                           " (the shortest run counted is 16 tokens), got " +
                           std::to_string(c.cache.prefix_breakers_min_common_tokens));
  }
  if (c.cache.in_flight_wait_ms < 0) {
    return invalidArgument("cache.in_flight_wait_ms: expected >= 0 (0 = never wait), got " +
                           std::to_string(c.cache.in_flight_wait_ms));
  }
  if (c.cache.identity_check_seconds < 1 || c.cache.identity_check_seconds > 3600) {
    return invalidArgument("cache.identity_check_seconds: expected 1..3600, got " +
                           std::to_string(c.cache.identity_check_seconds));
  }
  // Shared namespace names follow the team-id rule too (cache/namespace.h).
  for (const auto& [name, teams] : c.cache.shared_namespaces) {
    if (!validTeamId(name)) {
      return invalidArgument("cache.shared_namespaces: " + quoteValue(name) +
                             " is not a namespace name (1..128 of A-Z a-z 0-9 . _ -)");
    }
    for (const std::string& team : teams) {
      if (!validTeamId(team)) {
        return invalidArgument("cache.shared_namespaces." + name + ": " + quoteValue(team) +
                               " is not a team id (1..128 of A-Z a-z 0-9 . _ -)");
      }
    }
  }
  const ServingOptions& sv = c.serving;
  if (sv.max_running < 1 || sv.max_running > 4096) {
    return invalidArgument("serving.max_running: expected 1..4096, got " + std::to_string(sv.max_running));
  }
  if (sv.step_tokens < sv.max_running || sv.step_tokens > c.engine.max_batch_tokens) {
    return invalidArgument("serving.step_tokens: expected serving.max_running (" + std::to_string(sv.max_running) +
                           ") .. engine.max_batch_tokens (" + std::to_string(c.engine.max_batch_tokens) +
                           "), got " + std::to_string(sv.step_tokens));
  }
  if (sv.max_queued < 0) {
    return invalidArgument("serving.max_queued: expected >= 0, got " + std::to_string(sv.max_queued));
  }
  if (sv.max_queue_wait_ms < 0) {
    return invalidArgument("serving.max_queue_wait_ms: expected >= 0, got " + std::to_string(sv.max_queue_wait_ms));
  }
  if (sv.output_reservation_tokens < 0) {
    return invalidArgument("serving.output_reservation_tokens: expected >= 0, got " +
                           std::to_string(sv.output_reservation_tokens));
  }
  if (sv.max_stop_strings < 0 || sv.max_stop_strings > 64) {
    return invalidArgument("serving.max_stop_strings: expected 0..64, got " + std::to_string(sv.max_stop_strings));
  }
  for (const auto& [name, value] : {std::pair{"key_requests_per_minute", c.limits.key_requests_per_minute},
                                    std::pair{"key_tokens_per_minute", c.limits.key_tokens_per_minute},
                                    std::pair{"team_requests_per_minute", c.limits.team_requests_per_minute},
                                    std::pair{"team_tokens_per_minute", c.limits.team_tokens_per_minute},
                                    std::pair{"key_usage_queries_per_minute", c.limits.key_usage_queries_per_minute}}) {
    if (value < 0) return invalidArgument(std::string("limits.") + name + ": expected >= 0 (0 = unlimited), got " + std::to_string(value));
  }
  if (!c.limits.redis_url.empty()) {
    // The message shows the URL with its password hidden, never the password.
    const std::string& url = c.limits.redis_url;
    if (url.starts_with("rediss://")) {
      return invalidArgument("limits.redis_url: rediss:// (TLS) is not supported by the hiredis LatentGate links; use "
                             "redis:// on a trusted network or a unix:// socket, got " + quoteValue(redactUrlPassword(url)));
    }
    if (!url.starts_with("redis://") && !url.starts_with("unix://")) {
      // Not echoed: a value that is no URL at all may be a bare password.
      return invalidArgument("limits.redis_url: expected redis://[[user]:password@]host[:port][/db] or "
                             "unix:///path/to/redis.sock (the value is not shown)");
    }
  }
  for (const auto& [name, value, lo, hi] :
       {std::tuple{"redis_connect_timeout_ms", c.limits.redis_connect_timeout_ms, 10, 60000},
        std::tuple{"redis_command_timeout_ms", c.limits.redis_command_timeout_ms, 10, 60000},
        std::tuple{"redis_retry_ms", c.limits.redis_retry_ms, 10, 600000},
        std::tuple{"redis_fallback_replicas", c.limits.redis_fallback_replicas, 1, 1000}}) {
    if (value < lo || value > hi) {
      return invalidArgument(std::string("limits.") + name + ": expected " + std::to_string(lo) + ".." +
                             std::to_string(hi) + ", got " + std::to_string(value));
    }
  }
  {
    // With Redis, a reservation must outlive the longest request that holds
    // it even when its replica cannot extend it (Redis away for a while).
    const int64_t request_s = (int64_t{c.server.request_timeout_ms} + 999) / 1000;
    const int64_t lo = c.limits.redis_url.empty() ? 60 : std::max<int64_t>(60, request_s);
    const int64_t ttl = c.limits.redis_reservation_ttl_s;
    if (ttl < lo || ttl > 7 * 86400) {
      return invalidArgument("limits.redis_reservation_ttl_s: expected " + std::to_string(lo) +
                             " (at least 60 and server.request_timeout_ms) .. 604800 (7 days), got " +
                             std::to_string(ttl));
    }
  }
  if (c.cache.io_threads < 0 || c.cache.io_threads > 64) {
    return invalidArgument("cache.io_threads: expected 0..64 (0 = one per core, at most 4), got " +
                           std::to_string(c.cache.io_threads));
  }
  if (Status s = validateKvEvents(c.cache.kv_events); !s.isOk()) return s;
  return Status::ok();
}

Result<Config> loadConfig(const ConfigSources& sources) {
  Config config;
  if (!sources.file.empty()) {
    LG_ASSIGN_OR_RETURN(std::string text, readFile(sources.file, size_t{1} << 20));
    LG_RETURN_IF_ERROR(applyConfigText(text, "config file '" + sources.file + "'", config));
  }
  if (auto it = sources.environment.find("LATENTGATE_DATA"); it != sources.environment.end()) {
    config.data_dir = it->second;
  }
  for (const Field& f : kFields) {
    const std::string name = envName(f.path);
    if (auto it = sources.environment.find(name); it != sources.environment.end()) {
      LG_RETURN_IF_ERROR(setFromString(f, it->second, config).withContext("environment " + name));
    }
  }
  for (const auto& [path, value] : sources.flags) {
    LG_RETURN_IF_ERROR(setConfigField(path, value, config).withContext("flag"));
  }
  LG_RETURN_IF_ERROR(validateConfig(config));
  return config;
}

std::string configToJson(const Config& config) {
  Config copy = config;
  json out = json::object();
  for (const Field& f : kFields) {
    json* node = &out;
    std::string_view path = f.path;
    for (auto dot = path.find('.'); dot != std::string_view::npos; dot = path.find('.')) {
      node = &(*node)[std::string(path.substr(0, dot))];
      path.remove_prefix(dot + 1);
    }
    json& leaf = (*node)[std::string(path)];
    std::visit(
        [&](auto* value) {
          using T = std::remove_pointer_t<decltype(value)>;
          if constexpr (std::is_enum_v<T>) {
            leaf = std::string(enumName(*value));
          } else if constexpr (std::is_same_v<T, PriceTableSetting>) {
            leaf = json::parse(priceTableToJson(*value));
          } else if constexpr (std::is_same_v<T, BudgetSetting>) {
            leaf = json::parse(budgetToJson(*value));
          } else {
            leaf = *value;
          }
        },
        f.ref(copy));
  }
  if (!config.admin_key.empty()) out["admin_key"] = "(set)";  // a secret: never printed
  if (!config.server.metrics_token.empty()) out["server"]["metrics_token"] = "(set)";  // a secret too
  // May hold a password: shown with it hidden.
  if (!config.billing.postgres_url.empty()) out["billing"]["postgres_url"] = redactUrlPassword(config.billing.postgres_url);
  if (!config.limits.redis_url.empty()) out["limits"]["redis_url"] = redactUrlPassword(config.limits.redis_url);
  return out.dump(2);
}

std::map<std::string, std::string> processEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string_view::npos) env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

}  // namespace lg
