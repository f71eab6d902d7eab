// (c) The JSON-Schema-Test-Suite (draft 7, Debian's json-schema-test-suite):
// every schema is either compiled, and then random outputs validate with
// valijson, or refused with an error whose keyword occurs in the schema.
#include <filesystem>
#include <fstream>

#include "tests/text/grammar/grammar_test_support.h"

namespace lg::text::grammar {
namespace {

TEST(JsonSchemaTestSuite, SupportedValidateRefusedNameKeyword) {
  const std::filesystem::path dir = "/usr/share/json-schema-test-suite/tests/draft7";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "json-schema-test-suite is not installed";
  auto vocab = testing::smallVocabulary();
  int supported = 0, refused = 0, outputs = 0, validated = 0, stuck = 0, unnamed = 0;
  std::map<std::string, int> by_keyword;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f);
    const nlohmann::json groups = nlohmann::json::parse(in);
    for (const nlohmann::json& group : groups) {
      const nlohmann::json& schema = group["schema"];
      auto g = Grammar::fromJsonSchema(nlohmann::ordered_json::parse(schema.dump()));
      if (auto* err = std::get_if<GrammarError>(&g)) {
        ++refused;
        ++by_keyword[err->keyword];
        const bool named = err->keyword.empty() || err->keyword[0] == '(' ||
                           schema.dump().find("\"" + err->keyword + "\"") != std::string::npos;
        if (!named) {
          ++unnamed;
          ADD_FAILURE() << f.filename() << ": " << group["description"] << ": " << err->toString();
        }
        continue;
      }
      ++supported;
      auto grammar = std::get<std::shared_ptr<const Grammar>>(g);
      for (unsigned seed = 0; seed < 2; ++seed) {
        std::mt19937 rng(seed);
        Matcher m(grammar, vocab);
        std::string text;
        if (!testing::generate(m, rng, &text, 200, 0.5)) {
          ++stuck;
          ADD_FAILURE() << f.filename() << ": " << group["description"] << ": stuck after " << text;
          continue;
        }
        if (!m.canEnd()) continue;
        ++outputs;
        std::string why;
        bool ok;
        try {
          ok = testing::validates(schema, text, &why);
        } catch (const std::exception& e) {
          --outputs;  // valijson cannot read this schema
          continue;
        }
        if (ok) {
          ++validated;
        } else {
          ADD_FAILURE() << f.filename() << ": " << group["description"] << ": " << text << " -> " << why;
        }
      }
    }
  }
  std::printf("JSON-Schema-Test-Suite draft7: %d schemas supported, %d refused (%d without the keyword named); "
              "%d generated outputs, %d validated, %d stuck\nrefused by keyword:",
              supported, refused, unnamed, outputs, validated, stuck);
  for (const auto& [k, n] : by_keyword) std::printf(" %s=%d", k.c_str(), n);
  std::printf("\n");
  EXPECT_GT(supported, 50);
}

}  // namespace
}  // namespace lg::text::grammar
