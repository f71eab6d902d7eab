#include "common/url_redact.h"

#include <gtest/gtest.h>

namespace lg {
namespace {

TEST(UrlRedact, HidesTheUserinfoPassword) {
  EXPECT_EQ(redactUrlPassword("postgresql://lg:s3cret@db.internal:5432/ledger?sslmode=require"),
            "postgresql://lg:***@db.internal:5432/ledger?sslmode=require");
  EXPECT_EQ(redactUrlPassword("redis://:pw@127.0.0.1:6379/0"), "redis://:***@127.0.0.1:6379/0");
  // A password holding '@' (percent-encoding is the rule, but people forget).
  EXPECT_EQ(redactUrlPassword("postgres://u:a@b@h/db"), "postgres://u:***@h/db");
}

TEST(UrlRedact, HidesQueryAndKeyValuePasswords) {
  EXPECT_EQ(redactUrlPassword("postgresql://h/db?user=u&password=pw&sslmode=disable"),
            "postgresql://h/db?user=u&password=***&sslmode=disable");
  EXPECT_EQ(redactUrlPassword("host=h password=pw dbname=d"), "host=h password=*** dbname=d");
  EXPECT_EQ(redactUrlPassword("host=h password = 'p w' dbname=d"), "host=h password = '***' dbname=d");
}

TEST(UrlRedact, LeavesUrlsWithoutPasswordsAlone) {
  for (const char* url : {"postgresql://lg@h:5432/db", "postgresql:///db?host=/tmp", "host=h dbname=d", "",
                          "postgresql://h:5432/db"}) {
    EXPECT_EQ(redactUrlPassword(url), url);
  }
}

TEST(UrlRedact, HidesThePasswordInAMessage) {
  EXPECT_EQ(redactPasswordIn("could not connect with s3cret twice: s3cret", "postgresql://u:s3cret@h/db"),
            "could not connect with *** twice: ***");
  EXPECT_EQ(redactPasswordIn("no secret here", "postgresql://u@h/db"), "no secret here");
}

}  // namespace
}  // namespace lg
