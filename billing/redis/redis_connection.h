// RedisConnection: one connection to Redis through hiredis, for the counters
// that replicas share (docs/billing.md, "Budgets and limits shared by
// replicas"). Small on purpose: pipelines of commands, Lua scripts run by
// their SHA1 (EVALSHA, loaded again after a NOSCRIPT reply), timeouts, and
// a reconnect after a failure. hiredis stays inside redis_connection.cc.
//
// States: not connected -> (first call) connected -> (an I/O error, a
// timeout, a refused connect) failed until `retry_ms` has passed, during
// which every call fails at once with Unavailable (a store that is away
// costs callers nothing), then the next call connects again.
//
// Two ways to use it, not mixed on one connection at once:
//   - pipeline(): send commands, then wait for their replies (setup, tests);
//   - streaming: send() writes a command at once, however many are still
//     awaited, and receive() hands out the replies, each with the token it
//     was sent with, once fd() is readable. One thread multiplexes every
//     caller's commands on one connection, and none waits for another's
//     batch (RedisLimits).
//
// A connection found broken by the server (EOF, reset: a Redis restart while
// the connection was idle) is made again once and what was awaited is sent
// again at once, so every command sent here must be safe to run twice: the
// limit scripts are (admission by request id, settlement behind a marker,
// releases and refreshes by name).
//
// Thread-safety: none; one owner thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

struct redisContext;  // hiredis

namespace lg::billing::redis {

struct RedisOptions {
  // redis://[[user]:password@]host[:port][/db] or unix:///path/to/redis.sock[?db=N]
  // (TLS, rediss://, is not supported by the hiredis Debian ships).
  std::string url;
  int connect_timeout_ms = 200;
  int command_timeout_ms = 250;  // each read or write on the socket
  int retry_ms = 1000;           // after a failure, calls fail at once for this long
};

// Where a URL points, and how to sign in.
struct RedisEndpoint {
  std::string host;         // empty for a unix socket
  int port = 6379;
  std::string unix_path;    // empty for TCP
  std::string user;         // Redis 6 ACL user; empty: AUTH with the password alone
  std::string password;     // empty: no AUTH
  int db = 0;
};
Result<RedisEndpoint> parseRedisUrl(std::string_view url);

struct RedisReply {
  enum class Type : uint8_t { kNil, kInteger, kString, kStatus, kError, kArray };
  Type type = Type::kNil;
  int64_t integer = 0;
  std::string str;                  // kString, kStatus, kError
  std::vector<RedisReply> elements;  // kArray

  bool isError() const { return type == Type::kError; }
  // An integer, or a string that holds one ("42"); `fallback` otherwise.
  int64_t asInt(int64_t fallback = 0) const;
};

using RedisCommand = std::vector<std::string>;

// A Lua script and its SHA1, the name EVALSHA runs it by.
class RedisScript {
 public:
  explicit RedisScript(std::string body);
  const std::string& body() const { return body_; }
  const std::string& sha() const { return sha_; }
  // EVALSHA <sha> <#keys> keys... args...
  RedisCommand call(const std::vector<std::string>& keys, const std::vector<std::string>& args) const;

 private:
  std::string body_;
  std::string sha_;
};

class RedisConnection {
 public:
  explicit RedisConnection(RedisOptions options);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Scripts that pipelines may call; a NOSCRIPT reply to one of them loads
  // it (SCRIPT LOAD) and runs that command again. Must outlive the connection.
  void addScript(const RedisScript* script) { scripts_.push_back(script); }

  // Sends every command, then reads every reply, in order; a command Redis
  // refused is a kError reply, not a failed call. Unavailable: Redis could
  // not be reached or did not answer in time (the connection is dropped; some
  // commands may have run). Connects first when needed.
  Result<std::vector<RedisReply>> pipeline(const std::vector<RedisCommand>& commands);
  Result<RedisReply> command(const RedisCommand& command);

  // ---- streaming
  using Token = uint64_t;
  struct Received {
    Token token;
    RedisReply reply;
  };
  // Writes `command` now, connecting first when needed; its reply comes from
  // receive() with `token`. Unavailable: Redis could not be reached (cooling
  // down, connecting failed, the write failed): the connection is dropped,
  // and `lost` gets the tokens of every command awaited, this one included.
  Status send(const RedisCommand& command, Token token, std::vector<Token>& lost);
  // The same for several commands, written together (one system call when
  // the socket takes them all).
  struct Outgoing {
    Token token;
    RedisCommand command;
  };
  Status send(std::vector<Outgoing> batch, std::vector<Token>& lost);
  // The socket to wait on for replies; -1 when not connected.
  int fd() const;
  size_t awaited() const { return awaited_.size(); }
  // When a reply last came, or the first command was sent after none was
  // awaited: awaited commands with no reply for command_timeout_ms since
  // then have timed out (expire()).
  std::chrono::steady_clock::time_point lastProgress() const { return last_progress_; }
  // Once fd() is readable: appends every complete reply that arrived, in the
  // order their commands were sent. A NOSCRIPT reply loads the scripts and
  // sends that command again (its reply comes later). Unavailable: the
  // connection failed and was dropped; `lost` gets the tokens whose replies
  // will never come.
  Status receive(std::vector<Received>& replies, std::vector<Token>& lost);
  // Awaited replies took too long: drops the connection and cools down;
  // the tokens of every command awaited.
  std::vector<Token> expire();

  // Whether the last call reached Redis, and whether calls fail at once now.
  bool connected() const { return ctx_ != nullptr; }
  bool coolingDown() const { return std::chrono::steady_clock::now() < retry_at_; }
  // The time left before the next connection attempt (zero when none is pending).
  std::chrono::milliseconds retryIn() const;
  const RedisOptions& options() const { return options_; }

 private:
  Status connect();
  void drop();
  // One attempt: send and read. `stale` set when the failure was the
  // server's end of an old connection (EOF, reset), worth one retry.
  Result<std::vector<RedisReply>> exchange(const std::vector<RedisCommand>& commands, bool* stale);
  const RedisScript* scriptBySha(std::string_view sha) const;
  // Appends a command to the output buffer; writes the buffer out.
  bool append(const RedisCommand& command);
  bool writeOut();
  bool write(const RedisCommand& command) { return append(command) && writeOut(); }
  // The connection failed: dropped, cooling down, every awaited token lost.
  void failAwaited(std::vector<Token>& lost);

  struct Awaited {
    Token token = 0;
    RedisCommand command;
    bool internal = false;     // a SCRIPT LOAD sent for a NOSCRIPT reply: its reply is not handed out
    bool loaded_for = false;   // sent again after a NOSCRIPT reply already
  };

  const RedisOptions options_;
  Result<RedisEndpoint> endpoint_;
  redisContext* ctx_ = nullptr;
  std::chrono::steady_clock::time_point retry_at_{};
  std::vector<const RedisScript*> scripts_;
  std::deque<Awaited> awaited_;  // streaming: sent, reply not yet read, in order
  std::chrono::steady_clock::time_point last_progress_{};
  bool resent_ = false;  // the awaited commands were sent again on a new connection, no reply since
};

}  // namespace lg::billing::redis
