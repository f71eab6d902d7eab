#include "common/team_id.h"

#include <string>

#include <gtest/gtest.h>

namespace lg {
namespace {

TEST(TeamIdTest, LettersDigitsDotUnderscoreAndDashFromOneTo128Characters) {
  for (std::string_view ok : {"a", "team-a", "Team_B.2", "0", "...", "-_-", "ABCxyz019"}) {
    EXPECT_TRUE(validTeamId(ok)) << ok;
    EXPECT_TRUE(checkTeamId(ok).isOk()) << ok;
  }
  EXPECT_TRUE(validTeamId(std::string(128, 'x')));
  EXPECT_FALSE(validTeamId(""));
  EXPECT_FALSE(validTeamId(std::string(129, 'x')));
  // Separators, spaces, quotes, non-ASCII letters (which isalnum might take
  // in some locales) and control characters are all outside the set.
  const std::string_view bad_ids[] = {"a/b", "a b", "team:a", "a\"b", "\xc3\xa9quipe", "a\nb",
                                      std::string_view("a\0b", 3), "*", "a%2Fb"};
  for (std::string_view bad : bad_ids) {
    EXPECT_FALSE(validTeamId(bad)) << bad;
    EXPECT_FALSE(checkTeamId(bad).isOk()) << bad;
  }
}

TEST(TeamIdTest, ErrorsNameWhatWasCheckedAndWhy) {
  const Status empty = checkTeamId("");
  EXPECT_EQ(empty.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.message(), "team id must be 1 to 128 characters, got 0");
  EXPECT_EQ(checkTeamId(std::string(129, 'x'), "shared namespace name").message(),
            "shared namespace name must be 1 to 128 characters, got 129");
  EXPECT_EQ(checkTeamId("a/b").message(), "team id may hold only letters, digits, '.', '_' and '-'");
}

}  // namespace
}  // namespace lg
