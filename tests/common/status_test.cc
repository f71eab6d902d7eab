#include "common/status.h"

#include <gtest/gtest.h>

namespace lg {
namespace {

Result<int> half(int x) {
  if (x % 2 != 0) return invalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> quarter(int x) {
  LG_ASSIGN_OR_RETURN(int h, half(x));
  LG_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status checkPositive(int x) {
  if (x <= 0) return outOfRange("not positive");
  return Status::ok();
}

Status both(int a, int b) {
  LG_RETURN_IF_ERROR(checkPositive(a));
  LG_RETURN_IF_ERROR(checkPositive(b));
  return Status::ok();
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::ok().isOk());
  Status s = invalidArgument("bad field");
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.toString(), "InvalidArgument: bad field");
  EXPECT_EQ(s.withContext("loading x").message(), "loading x: bad field");
  EXPECT_TRUE(Status::ok().withContext("ignored").isOk());
}

TEST(StatusTest, ResultPropagates) {
  EXPECT_EQ(*quarter(8), 2);
  Result<int> r = quarter(6);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().message(), "odd: 3");
  EXPECT_TRUE(both(1, 2).isOk());
  EXPECT_EQ(both(1, -2).code(), StatusCode::kOutOfRange);
}

TEST(StatusTest, QuotedValuesStayOneBoundedLine) {
  EXPECT_EQ(quoteValue("verbose"), "\"verbose\"");
  EXPECT_EQ(quoteValue("a\nb\tc"), "\"a?b?c\"");
  EXPECT_EQ(quoteValue(std::string(200, 'x')), "\"" + std::string(200, 'x') + "\"");
  EXPECT_EQ(quoteValue(std::string(201, 'x')), "\"" + std::string(200, 'x') + "...\"");
}

}  // namespace
}  // namespace lg
