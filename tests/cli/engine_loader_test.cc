// cli/engine_loader.h in-process, on the demo model that servedModelDir
// writes: what each option loads, the backend's options, the failing step
// with the step's own Status, and the demo model made once.
#include "cli/engine_loader.h"

#include <sstream>

#include <gtest/gtest.h>

#include "engine/backend_config.h"
#include "engine/model/model.h"
#include "tests/support/temp_dir.h"

namespace lg::cli::testing {
namespace {

class EngineLoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_dir_ = new test::TempDir("lg_engine_loader");
    std::ostringstream notices;
    auto dir = servedModelDir(config(), notices);
    ASSERT_TRUE(dir.isOk()) << dir.status().toString();
    EXPECT_EQ(*dir, data_dir_->path() + "/models/demo");
    EXPECT_NE(notices.str().find("making the demo model in " + *dir), std::string::npos) << notices.str();
    model_dir_ = new std::string(*dir);
  }
  static void TearDownTestSuite() {
    delete model_dir_;
    model_dir_ = nullptr;
    delete data_dir_;
    data_dir_ = nullptr;
  }

  // A small pool and two threads: the defaults size the pool for four
  // sequences of the model's whole context.
  static Config config() {
    Config c;
    c.data_dir = data_dir_->path();
    c.engine.threads = 2;
    c.engine.pool_blocks = 16;
    return c;
  }

  static test::TempDir* data_dir_;
  static std::string* model_dir_;
};

test::TempDir* EngineLoaderTest::data_dir_ = nullptr;
std::string* EngineLoaderTest::model_dir_ = nullptr;

TEST_F(EngineLoaderTest, LoadsTokenizerTemplateModelAndBackend) {
  EngineLoadOptions options;
  options.model_dir = *model_dir_;
  auto loaded = loadEngine(config(), options);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().toString();
  EXPECT_EQ(loaded->model_dir, *model_dir_);
  ASSERT_NE(loaded->tokenizer, nullptr);
  EXPECT_FALSE(loaded->tokenizer->encode("Hello").value().empty());
  EXPECT_TRUE(loaded->chat_template.has_value());
  ASSERT_NE(loaded->backend, nullptr);
  EXPECT_EQ(loaded->backend_options.num_blocks, engine::backendOptions(config()).num_blocks);
  EXPECT_EQ(loaded->backend->blocks().capacity(), 16);
  EXPECT_GT(loaded->load_ms, 0.0);
}

TEST_F(EngineLoaderTest, LoadsOnlyWhatIsAskedForWithTheGivenBackendOptions) {
  EngineLoadOptions options;
  options.model_dir = *model_dir_;
  options.tokenizer = false;
  options.chat_template = false;
  options.terminal_progress = false;
  engine::BackendOptions backend_options = engine::backendOptions(config());
  backend_options.num_blocks = 3;
  options.backend_options = backend_options;
  auto loaded = loadEngine(config(), options);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().toString();
  EXPECT_EQ(loaded->tokenizer, nullptr);
  EXPECT_FALSE(loaded->chat_template.has_value());
  EXPECT_EQ(loaded->backend_options.num_blocks, 3);
  EXPECT_EQ(loaded->backend->blocks().capacity(), 3);
}

TEST_F(EngineLoaderTest, AFailureNamesItsStepAndKeepsItsStatus) {
  test::TempDir empty("lg_engine_loader_empty");
  EngineLoadOptions options;
  options.model_dir = empty.path();
  EngineLoadStep step = EngineLoadStep::kBackend;
  auto loaded = loadEngine(config(), options, &step);
  ASSERT_FALSE(loaded.isOk());
  EXPECT_EQ(step, EngineLoadStep::kTokenizer);
  EXPECT_EQ(loaded.status().toString(), text::Tokenizer::loadFromDir(empty.path()).status().toString());

  options.tokenizer = false;
  options.chat_template = false;
  loaded = loadEngine(config(), options, &step);
  ASSERT_FALSE(loaded.isOk());
  EXPECT_EQ(step, EngineLoadStep::kModel);
  EXPECT_EQ(loaded.status().toString(), engine::Model::load(empty.path()).status().toString());

  EXPECT_EQ(engineLoadStepName(EngineLoadStep::kTokenizer), "tokenizer");
  EXPECT_EQ(engineLoadStepName(EngineLoadStep::kChatTemplate), "chat template");
  EXPECT_EQ(engineLoadStepName(EngineLoadStep::kModel), "model");
  EXPECT_EQ(engineLoadStepName(EngineLoadStep::kBackend), "backend");
}

TEST_F(EngineLoaderTest, ServedModelDirIsTheConfiguredOneOrTheDemoMadeOnce) {
  std::ostringstream notices;
  auto again = servedModelDir(config(), notices);
  ASSERT_TRUE(again.isOk()) << again.status().toString();
  EXPECT_EQ(*again, *model_dir_);
  EXPECT_EQ(notices.str(), "");  // already there: not written again

  Config configured = config();
  configured.engine.model_dir = "/nonexistent/model";
  auto named = servedModelDir(configured, notices);
  ASSERT_TRUE(named.isOk()) << named.status().toString();
  EXPECT_EQ(*named, "/nonexistent/model");
  EXPECT_EQ(notices.str(), "");
}

}  // namespace
}  // namespace lg::cli::testing
