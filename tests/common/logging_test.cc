#include "common/logging.h"

#include <unistd.h>

#include <cstdio>
#include <sstream>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace lg {
namespace {

// Captures what is written to fd 2 while alive.
class StderrCapture {
 public:
  StderrCapture() : file_(std::tmpfile()), saved_(dup(2)) {
    fflush(stderr);
    dup2(fileno(file_), 2);
  }
  std::string finish() {
    fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    std::string out;
    std::rewind(file_);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, file_)) > 0) out.append(buf, n);
    std::fclose(file_);
    return out;
  }

 private:
  FILE* file_;
  int saved_;
};

TEST(LoggingTest, JsonLinesAreValidJsonWithEscapes) {
  LogOptions options;
  options.format = LogFormat::kJson;
  initLogging(options);
  spdlog::logger* log = componentLogger("engine");
  StderrCapture capture;
  log->info("loaded \"model\"\twith\n{} layers \x01", 3);
  log->flush();
  const std::string out = capture.finish();
  std::istringstream lines(out);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line)) << out;
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["logger"], "engine");
  EXPECT_EQ(j["msg"], "loaded \"model\"\twith\n3 layers \x01");
  EXPECT_TRUE(j.contains("ts"));
}

TEST(LoggingTest, LevelAppliesToExistingLoggers) {
  spdlog::logger* log = componentLogger("cache");
  LogOptions options;
  options.level = "warn";
  initLogging(options);
  EXPECT_FALSE(log->should_log(spdlog::level::info));
  EXPECT_TRUE(log->should_log(spdlog::level::warn));
  EXPECT_EQ(componentLogger("cache"), log);  // one logger per component
  options.level = "info";
  initLogging(options);
  EXPECT_TRUE(log->should_log(spdlog::level::info));
}

TEST(LoggingTest, TextFormatIsHumanReadable) {
  LogOptions options;
  initLogging(options);
  spdlog::logger* log = componentLogger("proxy");
  StderrCapture capture;
  log->warn("listening on {}", "127.0.0.1:8443");
  log->flush();
  const std::string out = capture.finish();
  EXPECT_NE(out.find("[proxy] listening on 127.0.0.1:8443"), std::string::npos) << out;
  EXPECT_NE(out.find("warn"), std::string::npos) << out;
}

}  // namespace
}  // namespace lg
