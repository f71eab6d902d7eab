#include "tests/support/redis_server.h"

#include <hiredis/hiredis.h>
#include <signal.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace lg::test {
namespace {

// PING through hiredis; "" when the server cannot be reached.
std::string ping(int port) {
  timeval tv{2, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  std::string out;
  if (c != nullptr && c->err == 0) {
    auto* reply = static_cast<redisReply*>(redisCommand(c, "PING"));
    if (reply != nullptr && reply->type == REDIS_REPLY_STATUS) out.assign(reply->str, reply->len);
    if (reply != nullptr) freeReplyObject(reply);
  }
  if (c != nullptr) redisFree(c);
  return out;
}

TEST(RedisServer, StartsPrivatelyAnswersPingAndStopsByPid) {
  std::string error;
  std::string dir;
  {
    auto redis = RedisServer::create(&error);
    ASSERT_NE(redis, nullptr) << error;
    dir = redis->dir();
    EXPECT_NE(redis->port(), 6379);
    EXPECT_TRUE(std::filesystem::exists(dir + "/redis.sock"));
    EXPECT_EQ(ping(redis->port()), "PONG");

    const pid_t pid = redis->pid();
    const int port = redis->port();
    redis->stop();
    EXPECT_FALSE(redis->running());
    EXPECT_EQ(ping(port), "");
    EXPECT_NE(kill(pid, 0), 0);  // reaped: no such process (of ours) any more

    ASSERT_TRUE(redis->start(&error)) << error;
    EXPECT_EQ(redis->port(), port);
    EXPECT_EQ(ping(port), "PONG");
  }
  EXPECT_FALSE(std::filesystem::exists(dir));  // the destructor stopped it and removed its directory
}

}  // namespace
}  // namespace lg::test
