#include "common/secret_strength.h"

#include <cmath>
#include <string>

#include <gtest/gtest.h>

namespace lg {
namespace {

// Issue 21, item 12: the estimate is length x log2 of the alphabet the
// character classes span, and 128 bits is the floor.
TEST(SecretStrengthTest, EstimatesLengthTimesTheAlphabetItsClassesSpan) {
  EXPECT_EQ(estimatedSecretBits(""), 0.0);
  EXPECT_EQ(estimatedSecretBits("aaaa"), 4 * std::log2(26.0));
  EXPECT_EQ(estimatedSecretBits("aB3"), 3 * std::log2(62.0));
  EXPECT_EQ(estimatedSecretBits("a-9"), 3 * std::log2(69.0));
  EXPECT_EQ(estimatedSecretBits("aZ0_"), 4 * std::log2(95.0));
}

TEST(SecretStrengthTest, ASixteenCharacterKeyIsRefusedAndAGeneratedOnePasses) {
  // The example: 16 characters of lowercase, digits and '-' (~98 bits).
  const Status weak = checkSecretStrength("adm-secret123456", "the admin key");
  ASSERT_FALSE(weak.isOk());
  EXPECT_EQ(weak.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(weak.message().find("the admin key is too weak"), std::string::npos) << weak.message();
  EXPECT_NE(weak.message().find("128"), std::string::npos) << weak.message();
  EXPECT_EQ(weak.message().find("adm-secret123456"), std::string::npos) << "the message repeats the secret";
  // What AdminKey generates: "lg-admin-" + 43 characters of base64url.
  EXPECT_TRUE(checkSecretStrength("lg-admin-" + std::string("Qx7_vB2-kLm9PzR4tYw8NcE1aHs6JdF0gUo3iKe5XbV"),
                                  "the admin key")
                  .isOk());
  // 32 random letters and digits clear the bar (~191 bits), 18 do not (~107).
  EXPECT_TRUE(checkSecretStrength("4fKp9QzT2mXc7RbN1vLw8HsJ3dGy6AeU", "x").isOk());
  EXPECT_FALSE(checkSecretStrength("4fKp9QzT2mXc7RbN1v", "x").isOk());
}

}  // namespace
}  // namespace lg
