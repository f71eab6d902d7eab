#include "tests/support/postgres_environment.h"

#include <memory>

#include <gtest/gtest.h>

namespace lg::test {
namespace {

PostgresServer* g_server = nullptr;

class PostgresEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    std::string error;
    server_ = PostgresServer::create(&error);
    ASSERT_NE(server_, nullptr) << error;
    g_server = server_.get();
  }
  void TearDown() override {
    g_server = nullptr;
    server_.reset();  // stops the postmaster it started, removes its directory
  }

 private:
  std::unique_ptr<PostgresServer> server_;
};

[[maybe_unused]] auto* const g_env = ::testing::AddGlobalTestEnvironment(new PostgresEnvironment);

}  // namespace

PostgresServer* sharedPostgres() { return g_server; }

std::optional<std::string> freshPostgresDatabase(const std::string& prefix, std::string* error) {
  if (g_server == nullptr) {
    *error = "no PostgreSQL: the test environment could not start one";
    return std::nullopt;
  }
  if (!g_server->running() && !g_server->start(error)) return std::nullopt;
  static int n = 0;
  const std::string name = prefix + std::to_string(++n);
  if (!g_server->createDatabase(name, error)) return std::nullopt;
  return g_server->url(name);
}

}  // namespace lg::test
