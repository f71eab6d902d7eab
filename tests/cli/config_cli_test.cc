// `latentgate config`: the effective configuration, and errors that name the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace lg::test {
namespace {

TEST(ConfigCliTest, PrintsEffectiveConfigWithOverrides) {
  auto r = runProcess({latentgateBinary(), "config", "--log-level", "debug"}, "",
                      {"LATENTGATE_ENGINE_THREADS=3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["log"]["level"], "debug");
  EXPECT_EQ(j["engine"]["threads"], 3);
}

TEST(ConfigCliTest, BadValueNamesFieldAndExitsTwo) {
  auto r = runProcess({latentgateBinary(), "config"}, "", {"LATENTGATE_SERVER_IO_THREADS=zero"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(r.signaled);
  EXPECT_NE(r.err.find("server.io_threads"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("zero"), std::string::npos) << r.err;
}

TEST(ConfigCliTest, UnknownFlagIsAUsageError) {
  auto r = runProcess({latentgateBinary(), "config", "--no-such-flag"}, "");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(r.signaled);
}

}  // namespace
}  // namespace lg::test
