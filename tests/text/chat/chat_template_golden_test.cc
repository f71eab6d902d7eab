// Byte-for-byte agreement with the real Jinja2 (goldens made by
// scripts/chat/gen_goldens.py) and with transformers' rendering of the V3
// template in tests/fixtures/tokenizer-golden.json.
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "text/chat/chat_template.h"

namespace lg::text {
namespace {

using nlohmann::json;

const std::string kFixtures = LG_FIXTURES_DIR;
const std::string kAssets = LG_ASSETS_DIR;

json readJson(const std::string& path) {
  auto text = readFile(path);
  EXPECT_TRUE(text.isOk()) << text.status().toString();
  return json::parse(*text);
}

TEST(ChatTemplateGoldenTest, MatchesJinja2ForEveryCase) {
  const json goldens = readJson(kFixtures + "/chat-templates/goldens.json");
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, file] : goldens["templates"].items()) {
    auto source = readFile(kFixtures + "/chat-templates/" + file.get<std::string>());
    ASSERT_TRUE(source.isOk()) << source.status().toString();
    auto parsed = ChatTemplate::parse(*source, goldens["bos_token"], goldens["eos_token"]);
    ASSERT_TRUE(parsed.isOk()) << name << ": " << parsed.status().toString();
    templates.emplace(name, std::move(parsed).value());
  }
  int rendered = 0, errors = 0;
  for (const json& c : goldens["cases"]) {
    const std::string label = c["template"].get<std::string>() + " / " + c["conversation"].get<std::string>() +
                              (c["add_generation_prompt"].get<bool>() ? " / gen" : " / no-gen");
    ChatRenderInput input;
    input.messages = &c["messages"];
    if (c.contains("tools")) input.tools = &c["tools"];
    if (c.contains("extra")) input.extra = &c["extra"];
    input.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    auto out = templates.at(c["template"]).render(input);
    if (c.contains("error")) {
      EXPECT_FALSE(out.isOk()) << label << ": Jinja2 raised " << c["error"] << " but we rendered:\n" << out->text;
      if (!out.isOk()) {
        EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << label;
      }
      ++errors;
      continue;
    }
    ASSERT_TRUE(out.isOk()) << label << ": " << out.status().toString();
    EXPECT_EQ(out->text, c["text"].get<std::string>()) << label;
    ++rendered;
  }
  EXPECT_GT(rendered, 300);
  EXPECT_GT(errors, 50);
}

// Every goldens template also loads through loadFromDir-style configs.
TEST(ChatTemplateGoldenTest, TokenizerGoldenChatsRenderExactly) {
  auto tmpl = ChatTemplate::loadFromDir(kAssets + "/deepseek-v3-tokenizer");
  ASSERT_TRUE(tmpl.isOk()) << tmpl.status().toString();
  const json golden = readJson(kFixtures + "/tokenizer-golden.json");
  ASSERT_EQ(golden["chats"].size(), 6u);
  for (const json& chat : golden["chats"]) {
    ChatRenderInput input;
    input.messages = &chat["messages"];
    input.add_generation_prompt = chat["add_generation_prompt"].get<bool>();
    auto out = tmpl->render(input);
    ASSERT_TRUE(out.isOk()) << out.status().toString();
    EXPECT_EQ(out->text, chat["text"].get<std::string>());
  }
}

}  // namespace
}  // namespace lg::text
