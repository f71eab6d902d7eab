// BlockingPool and Runs::kBlocking routes: a blocking route runs off the I/O
// thread, so that while it waits, a one-I/O-thread server still answers
// everything else; a full pool answers 503 at once; a handler that throws
// answers 500 and the pool goes on. Real server (plain HTTP on port 0) and
// raw sockets.
#include "proxy/http/blocking_pool.h"

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "proxy/http/http_server.h"
#include "proxy/http/router.h"
#include "tests/proxy/http/recording_exchange.h"
#include "tests/proxy/http/test_client.h"

namespace lg::proxy {
namespace {

using namespace std::chrono_literals;
using testing::RawClient;

// Closed until open(); open() may be called any number of times.
class Gate {
 public:
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

class BlockingRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    router_.setBlockingPool(&pool_);
    router_.add("GET", "/fast", [this](const HttpRequest&, std::shared_ptr<Exchange> e) {
      io_thread_ = std::this_thread::get_id();
      e->respond(200, {}, "fast");
    });
    router_.add("GET", "/slow", [this](const HttpRequest&, std::shared_ptr<Exchange> e) {
      slow_thread_ = std::this_thread::get_id();
      release_.wait();
      e->respond(200, {}, "slow");
    }, Runs::kBlocking);
    router_.add("GET", "/throws", [](const HttpRequest&, std::shared_ptr<Exchange>) -> void {
      throw std::runtime_error("a handler's bug");
    }, Runs::kBlocking);
    HttpServerOptions o;
    o.port = 0;
    o.plain_http = true;
    o.io_threads = 1;  // a blocked I/O thread would stall every connection
    auto s = HttpServer::start(o, router_.handler());
    ASSERT_TRUE(s.isOk()) << s.status().toString();
    server_ = std::move(s).value();
  }
  void TearDown() override {
    release_.open();  // whatever a failed test left waiting
    if (server_) server_->stop(std::chrono::steady_clock::now() + 2s);
  }

  // Sends a GET on a new connection; the client, to read the answer from.
  std::unique_ptr<RawClient> get(const std::string& path) {
    auto c = RawClient::connect(server_->port());
    EXPECT_TRUE(c && c->send("GET " + path + " HTTP/1.1\r\nhost: x\r\n\r\n"));
    return c;
  }

  BlockingPool pool_{BlockingPoolOptions{1, 2}};  // one thread, at most two jobs
  Router router_;
  std::unique_ptr<HttpServer> server_;
  Gate release_;
  std::atomic<std::thread::id> io_thread_, slow_thread_;  // written on the server's threads
};

TEST_F(BlockingRoutesTest, AWaitingRouteLeavesTheIoThreadFreeAndAFullPoolAnswers503) {
  auto slow1 = get("/slow");
  // The second waits for the pool's one thread: the pool now holds two jobs.
  auto slow2 = get("/slow");
  const auto t0 = std::chrono::steady_clock::now();
  while (pool_.queued() < 2 && std::chrono::steady_clock::now() - t0 < 10s) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(pool_.queued(), 2u);

  // Meanwhile the one I/O thread answers the rest at once.
  auto fast = get("/fast");
  EXPECT_NE(fast->readUntil("fast", 5s).find("HTTP/1.1 200"), std::string::npos) << fast->received();
  // A third blocking request finds the pool full: refused, not queued.
  auto refused = get("/slow");
  const std::string r = refused->readUntil("}", 5s);
  EXPECT_NE(r.find("HTTP/1.1 503"), std::string::npos) << r;
  EXPECT_NE(r.find("retry-after: 1"), std::string::npos) << r;
  EXPECT_NE(r.find("\"code\":\"server_overloaded\""), std::string::npos) << r;

  release_.open();
  EXPECT_NE(slow1->readUntil("slow", 5s).find("HTTP/1.1 200"), std::string::npos) << slow1->received();
  EXPECT_NE(slow2->readUntil("slow", 5s).find("HTTP/1.1 200"), std::string::npos) << slow2->received();
  EXPECT_NE(slow_thread_.load(), io_thread_.load());
  // A job leaves the count after its handler returns, which can be just after
  // the client has read the answer.
  const auto t1 = std::chrono::steady_clock::now();
  while (pool_.queued() > 0 && std::chrono::steady_clock::now() - t1 < 10s) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(pool_.queued(), 0u);
}

TEST_F(BlockingRoutesTest, AHandlerThatThrowsAnswers500AndThePoolGoesOn) {
  auto bad = get("/throws");
  const std::string r = bad->readUntil("}", 5s);
  EXPECT_NE(r.find("HTTP/1.1 500"), std::string::npos) << r;
  EXPECT_EQ(r.find("a handler's bug"), std::string::npos) << r;  // internals stay in the log
  release_.open();
  auto ok = get("/slow");
  EXPECT_NE(ok->readUntil("slow", 5s).find("HTTP/1.1 200"), std::string::npos) << ok->received();
}

TEST(BlockingPoolTest, WithoutAPoolABlockingRouteRunsInline) {
  Router router;
  std::thread::id ran;
  router.add("GET", "/x", [&](const HttpRequest&, std::shared_ptr<Exchange>) { ran = std::this_thread::get_id(); },
             Runs::kBlocking);
  HttpRequest request;
  request.method = "GET";
  request.path = "/x";
  router.handle(request, nullptr);
  EXPECT_EQ(ran, std::this_thread::get_id());
}

}  // namespace
}  // namespace lg::proxy

namespace lg::proxy {
namespace {

using testing::RecordingExchange;

// Issue 21, item 8: the admin lane is never filled by tenants, and one
// tenant holds at most its share of the tenants' lane.
TEST(BlockingPoolLanesTest, ATenantHoldsItsShareAndNeverTheAdminsLane) {
  BlockingPoolOptions o;
  o.threads = 1;
  o.max_queued = 3;
  o.max_queued_per_tenant = 2;
  BlockingPool pool(o);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  auto blocked = [&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return release; });
  };
  auto exchange = [](std::string who) {
    HttpRequest r;
    r.path = "/v1/usage";
    r.target = who;
    return std::make_shared<RecordingExchange>(std::move(r));
  };
  std::vector<std::shared_ptr<RecordingExchange>> answered;
  auto submit = [&](const JobOwner& owner) {
    auto e = exchange(owner.tenant);
    answered.push_back(e);
    pool.submit(owner, e, [&, e] {
      blocked();
      e->respond(200, {}, "");
    });
    return e;
  };
  submit(BlockingPool::tenant("team-a"));
  submit(BlockingPool::tenant("team-a"));
  auto over_share = submit(BlockingPool::tenant("team-a"));
  EXPECT_EQ(over_share->status(), 429) << "team-a holds its 2";
  EXPECT_NE(over_share->body.find("rate_limit_exceeded"), std::string::npos) << over_share->body;
  EXPECT_TRUE(over_share->headers.get("retry-after").has_value());
  EXPECT_EQ(pool.tenantQueued("team-a"), 2u);
  auto b = submit(BlockingPool::tenant("team-b"));
  EXPECT_EQ(b->status(), 0) << "team-b has room";
  auto full = submit(BlockingPool::tenant("team-c"));
  EXPECT_EQ(full->status(), 503) << "the lane is full";
  // The admin's job runs while every tenant thread is blocked.
  std::promise<void> ran;
  auto admin = exchange("admin");
  pool.submit(BlockingPool::admin(), admin, [&] {
    admin->respond(200, {}, "");
    ran.set_value();
  });
  EXPECT_EQ(ran.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  const auto t0 = std::chrono::steady_clock::now();
  while (pool.queued() > 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(pool.queued(), 0u);
  EXPECT_EQ(pool.tenantQueued("team-a"), 0u);
  EXPECT_EQ(b->status(), 200);
}

}  // namespace
}  // namespace lg::proxy
