#include "billing/redis/redis_connection.h"

#include <hiredis/hiredis.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstring>

#include "common/check.h"

namespace lg::billing::redis {
namespace {

timeval timevalOf(int ms) { return timeval{ms / 1000, (ms % 1000) * 1000}; }

// hiredis writes with write(2), which raises SIGPIPE on a connection the
// server reset (a Redis restart), and SIGPIPE's default ends the process.
// While one lives, this thread's writes get EPIPE instead, and a SIGPIPE
// they raised is taken off the thread before the mask is put back (what
// libpq does where MSG_NOSIGNAL cannot be used).
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~SigpipeBlocked() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      const timespec now{0, 0};
      while (sigtimedwait(&pipe, nullptr, &now) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t old_;
  bool was_pending_ = false;
};

// %XX escapes in a URL's user and password.
Result<std::string> percentDecoded(std::string_view s, std::string_view what) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    int v = 0;
    if (i + 2 >= s.size() || std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16).ptr != s.data() + i + 3) {
      return invalidArgument("a Redis URL's " + std::string(what) + " has a bad % escape");
    }
    out += static_cast<char>(v);
    i += 2;
  }
  return out;
}

Result<int> parseNumber(std::string_view s, int lo, int hi, std::string_view what) {
  int v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || v < lo || v > hi) {
    return invalidArgument("a Redis URL's " + std::string(what) + " must be a number " + std::to_string(lo) + ".." +
                           std::to_string(hi) + ", got '" + std::string(s) + "'");
  }
  return v;
}

RedisReply convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default:
      break;  // nil
  }
  return out;
}

}  // namespace

Result<RedisEndpoint> parseRedisUrl(std::string_view url) {
  RedisEndpoint e;
  std::string_view rest;
  const bool unix_socket = url.starts_with("unix://");
  if (url.starts_with("redis://")) {
    rest = url.substr(8);
  } else if (unix_socket) {
    rest = url.substr(7);
  } else if (url.starts_with("rediss://")) {
    return invalidArgument("rediss:// (TLS) is not supported: the hiredis LatentGate links has no TLS; use redis:// "
                           "on a trusted network, or a unix:// socket");
  } else {
    return invalidArgument("expected redis://[[user]:password@]host[:port][/db] or unix:///path/to/socket");
  }
  // Userinfo: up to the last '@' (a password may hold '@' only escaped, but be lenient).
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      // redis://password@host is how some clients write a password alone.
      LG_ASSIGN_OR_RETURN(e.password, percentDecoded(userinfo, "password"));
    } else {
      LG_ASSIGN_OR_RETURN(e.user, percentDecoded(userinfo.substr(0, colon), "user"));
      LG_ASSIGN_OR_RETURN(e.password, percentDecoded(userinfo.substr(colon + 1), "password"));
    }
  }
  if (unix_socket) {
    const size_t q = rest.find('?');
    e.unix_path = std::string(rest.substr(0, q));
    if (e.unix_path.empty() || e.unix_path[0] != '/') return invalidArgument("a unix:// Redis URL needs an absolute path");
    if (q != std::string_view::npos) {
      const std::string_view query = rest.substr(q + 1);
      if (!query.starts_with("db=")) return invalidArgument("a unix:// Redis URL takes only ?db=N");
      LG_ASSIGN_OR_RETURN(e.db, parseNumber(query.substr(3), 0, 1 << 20, "db"));
    }
    return e;
  }
  const size_t slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  if (slash != std::string_view::npos && slash + 1 < rest.size()) {
    LG_ASSIGN_OR_RETURN(e.db, parseNumber(rest.substr(slash + 1), 0, 1 << 20, "db"));
  }
  std::string_view port;
  if (hostport.starts_with("[")) {  // [::1]:6379
    const size_t close = hostport.find(']');
    if (close == std::string_view::npos) return invalidArgument("a Redis URL's IPv6 host lacks its ']'");
    e.host = std::string(hostport.substr(1, close - 1));
    if (close + 1 < hostport.size()) {
      if (hostport[close + 1] != ':') return invalidArgument("a Redis URL has text after its IPv6 host");
      port = hostport.substr(close + 2);
    }
  } else {
    const size_t colon = hostport.rfind(':');
    e.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) port = hostport.substr(colon + 1);
  }
  if (e.host.empty()) return invalidArgument("a Redis URL needs a host");
  if (!port.empty()) {
    LG_ASSIGN_OR_RETURN(e.port, parseNumber(port, 1, 65535, "port"));
  }
  return e;
}

int64_t RedisReply::asInt(int64_t fallback) const {
  if (type == Type::kInteger) return integer;
  if (type != Type::kString) return fallback;
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(str.data(), str.data() + str.size(), v);
  return ec == std::errc() && ptr == str.data() + str.size() ? v : fallback;
}

// ------------------------------------------------------------------ scripts

RedisScript::RedisScript(std::string body) : body_(std::move(body)) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(body_.data(), body_.size(), digest, &n, EVP_sha1(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned int i = 0; i < n; ++i) {
    sha_ += kHex[digest[i] >> 4];
    sha_ += kHex[digest[i] & 15];
  }
}

RedisCommand RedisScript::call(const std::vector<std::string>& keys, const std::vector<std::string>& args) const {
  RedisCommand c;
  c.reserve(3 + keys.size() + args.size());
  c.push_back("EVALSHA");
  c.push_back(sha_);
  c.push_back(std::to_string(keys.size()));
  c.insert(c.end(), keys.begin(), keys.end());
  c.insert(c.end(), args.begin(), args.end());
  return c;
}

// --------------------------------------------------------------- connection

RedisConnection::RedisConnection(RedisOptions options)
    : options_(std::move(options)), endpoint_(parseRedisUrl(options_.url)) {}

RedisConnection::~RedisConnection() { drop(); }

void RedisConnection::drop() {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
}

std::chrono::milliseconds RedisConnection::retryIn() const {
  const auto left = retry_at_ - std::chrono::steady_clock::now();
  return std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(left));
}

Status RedisConnection::connect() {
  LG_RETURN_IF_ERROR(endpoint_.status());
  const RedisEndpoint& e = *endpoint_;
  const timeval tv = timevalOf(options_.connect_timeout_ms);
  redisContext* c = e.unix_path.empty() ? redisConnectWithTimeout(e.host.c_str(), e.port, tv)
                                        : redisConnectUnixWithTimeout(e.unix_path.c_str(), tv);
  if (c == nullptr) return unavailable("Redis: out of memory for a connection");
  if (c->err != 0) {
    Status s = unavailable(std::string("Redis: connecting failed: ") + c->errstr);
    redisFree(c);
    return s;
  }
  ctx_ = c;
  redisSetTimeout(ctx_, timevalOf(options_.command_timeout_ms));
  if (e.unix_path.empty()) redisEnableKeepAlive(ctx_);
  // Signing in, the database, and the scripts, as one pipeline.
  std::vector<RedisCommand> setup;
  if (!e.password.empty()) {
    setup.push_back(e.user.empty() ? RedisCommand{"AUTH", e.password} : RedisCommand{"AUTH", e.user, e.password});
  }
  if (e.db != 0) setup.push_back({"SELECT", std::to_string(e.db)});
  for (const RedisScript* s : scripts_) setup.push_back({"SCRIPT", "LOAD", s->body()});
  bool stale = false;
  auto replies = exchange(setup, &stale);
  if (!replies.isOk()) return replies.status();
  for (size_t i = 0; i < replies->size(); ++i) {
    const RedisReply& r = (*replies)[i];
    if (!r.isError()) continue;
    drop();
    // The reply names the refusal (WRONGPASS, NOAUTH, ...), never the password.
    return unavailable("Redis: " + setup[i][0] + " refused: " + r.str);
  }
  return Status::ok();
}

Result<std::vector<RedisReply>> RedisConnection::exchange(const std::vector<RedisCommand>& commands, bool* stale) {
  *stale = false;
  auto failed = [&](std::string_view during) -> Status {
    // EOF or a reset: the server closed an idle connection (a restart).
    const std::string why = ctx_->errstr;
    *stale = ctx_->err == REDIS_ERR_EOF || why.find("reset") != std::string::npos ||
             why.find("Broken pipe") != std::string::npos;
    Status s = unavailable("Redis: " + std::string(during) + " failed: " + why);
    drop();
    return s;
  };
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const RedisCommand& c : commands) {
    argv.clear();
    lens.clear();
    for (const std::string& a : c) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      return failed("queueing a command");
    }
  }
  std::vector<RedisReply> out;
  out.reserve(commands.size());
  const SigpipeBlocked no_sigpipe;  // redisGetReply writes what was appended first
  for (size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) return failed("a command");
    out.push_back(convert(static_cast<redisReply*>(raw)));
    freeReplyObject(raw);
  }
  return out;
}

const RedisScript* RedisConnection::scriptBySha(std::string_view sha) const {
  for (const RedisScript* s : scripts_) {
    if (s->sha() == sha) return s;
  }
  return nullptr;
}

Result<std::vector<RedisReply>> RedisConnection::pipeline(const std::vector<RedisCommand>& commands) {
  if (commands.empty()) return std::vector<RedisReply>{};
  // Its replies would be taken for the streamed commands' (or theirs for its).
  LG_CHECK(awaited_.empty(), "a pipeline on a connection with ", awaited_.size(), " streamed command(s) awaited");
  Result<std::vector<RedisReply>> replies = unavailable("Redis: not tried");
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (ctx_ == nullptr) {
      if (coolingDown()) {
        return unavailable("Redis: unreachable, next attempt in " + std::to_string(retryIn().count()) + " ms");
      }
      if (Status s = connect(); !s.isOk()) {
        retry_at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.retry_ms);
        return s;
      }
      attempt = 1;  // a fresh connection that fails is not retried
    }
    bool stale = false;
    replies = exchange(commands, &stale);
    if (replies.isOk()) break;
    if (!stale || attempt == 1) {
      retry_at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.retry_ms);
      return replies.status();
    }
  }
  // NOSCRIPT: the server lost its scripts (SCRIPT FLUSH) without dropping us:
  // load them again and run those commands again, in their order (a
  // NOSCRIPT reply means the command did nothing).
  std::vector<size_t> again;
  for (size_t i = 0; i < replies->size(); ++i) {
    const RedisReply& r = (*replies)[i];
    if (r.isError() && r.str.starts_with("NOSCRIPT") && commands[i].size() > 1 && scriptBySha(commands[i][1])) {
      again.push_back(i);
    }
  }
  if (again.empty()) return replies;
  std::vector<RedisCommand> retry;
  for (const RedisScript* s : scripts_) retry.push_back({"SCRIPT", "LOAD", s->body()});
  for (size_t i : again) retry.push_back(commands[i]);
  bool stale = false;
  auto second = exchange(retry, &stale);
  if (!second.isOk()) {
    retry_at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.retry_ms);
    return second.status();
  }
  for (size_t k = 0; k < again.size(); ++k) (*replies)[again[k]] = std::move((*second)[scripts_.size() + k]);
  return replies;
}

// ---------------------------------------------------------------- streaming

int RedisConnection::fd() const { return ctx_ == nullptr ? -1 : ctx_->fd; }

bool RedisConnection::append(const RedisCommand& command) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(command.size());
  lens.reserve(command.size());
  for (const std::string& a : command) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) == REDIS_OK;
}

bool RedisConnection::writeOut() {
  const SigpipeBlocked no_sigpipe;
  // The socket blocks, bounded by command_timeout_ms (SO_SNDTIMEO): a write
  // returns once the kernel took the bytes, long before the reply.
  for (int done = 0; !done;) {
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) return false;
  }
  return true;
}

void RedisConnection::failAwaited(std::vector<Token>& lost) {
  for (const Awaited& a : awaited_) {
    if (!a.internal) lost.push_back(a.token);
  }
  awaited_.clear();
  resent_ = false;
  drop();
  retry_at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.retry_ms);
}

Status RedisConnection::send(const RedisCommand& command, Token token, std::vector<Token>& lost) {
  std::vector<Outgoing> one;
  one.push_back({token, command});
  return send(std::move(one), lost);
}

Status RedisConnection::send(std::vector<Outgoing> batch, std::vector<Token>& lost) {
  if (batch.empty()) return Status::ok();
  if (ctx_ == nullptr) {
    Status s = coolingDown()
                   ? unavailable("Redis: unreachable, next attempt in " + std::to_string(retryIn().count()) + " ms")
                   : connect();
    if (!s.isOk()) {
      if (!coolingDown()) retry_at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.retry_ms);
      for (const Outgoing& o : batch) lost.push_back(o.token);
      return s;
    }
  }
  if (awaited_.empty()) last_progress_ = std::chrono::steady_clock::now();
  bool ok = true;
  for (Outgoing& o : batch) {
    ok = ok && append(o.command);
    awaited_.push_back({o.token, std::move(o.command), false, false});
  }
  if (!ok || !writeOut()) {
    Status s = unavailable(std::string("Redis: a write failed: ") + ctx_->errstr);
    failAwaited(lost);
    return s;
  }
  return Status::ok();
}

Status RedisConnection::receive(std::vector<Received>& replies, std::vector<Token>& lost) {
  if (ctx_ == nullptr) return unavailable("Redis: not connected");
  if (redisBufferRead(ctx_) != REDIS_OK) {
    const std::string why = ctx_->errstr;
    const bool stale = ctx_->err == REDIS_ERR_EOF || why.find("reset") != std::string::npos;
    if (stale && !resent_) {
      // The server closed the connection (a restart): once, a new one, and
      // everything awaited sent again on it, in order.
      drop();
      if (connect().isOk()) {
        resent_ = true;
        last_progress_ = std::chrono::steady_clock::now();
        bool ok = true;
        for (const Awaited& a : awaited_) ok = ok && write(a.command);
        if (ok) return Status::ok();
      }
    }
    Status s = unavailable("Redis: a read failed: " + why);
    failAwaited(lost);
    return s;
  }
  for (;;) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) {
      Status s = unavailable(std::string("Redis: a reply could not be read: ") + ctx_->errstr);
      failAwaited(lost);
      return s;
    }
    if (raw == nullptr) return Status::ok();  // the rest has not arrived yet
    RedisReply reply = convert(static_cast<redisReply*>(raw));
    freeReplyObject(raw);
    if (awaited_.empty()) {
      Status s = unavailable("Redis: a reply to no command");
      failAwaited(lost);
      return s;
    }
    Awaited a = std::move(awaited_.front());
    awaited_.pop_front();
    last_progress_ = std::chrono::steady_clock::now();
    resent_ = false;
    if (a.internal) continue;
    if (reply.isError() && reply.str.starts_with("NOSCRIPT") && !a.loaded_for && a.command.size() > 1 &&
        scriptBySha(a.command[1]) != nullptr) {
      // The server lost its scripts (SCRIPT FLUSH) without dropping us; the
      // command did nothing: load them and send it again.
      bool ok = true;
      for (const RedisScript* s : scripts_) {
        RedisCommand load{"SCRIPT", "LOAD", s->body()};
        awaited_.push_back({0, load, true, false});
        ok = ok && write(load);
      }
      awaited_.push_back({a.token, std::move(a.command), false, true});
      if (!ok || !write(awaited_.back().command)) {
        Status s = unavailable(std::string("Redis: a write failed: ") + ctx_->errstr);
        failAwaited(lost);
        return s;
      }
      continue;
    }
    replies.push_back({a.token, std::move(reply)});
  }
}

std::vector<RedisConnection::Token> RedisConnection::expire() {
  std::vector<Token> lost;
  failAwaited(lost);
  return lost;
}

Result<RedisReply> RedisConnection::command(const RedisCommand& command) {
  LG_ASSIGN_OR_RETURN(std::vector<RedisReply> replies, pipeline({command}));
  return std::move(replies.front());
}

}  // namespace lg::billing::redis
