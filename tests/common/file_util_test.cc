#include "common/file_util.h"

#include "tests/support/temp_dir.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

namespace lg {
namespace {

class FileUtilTest : public ::testing::Test {
 protected:
  test::TempDir tmp_{"lg_file_util"};
  const std::string dir_ = tmp_.path();
};

TEST_F(FileUtilTest, AtomicWriteThenReadAndMap) {
  const std::string path = dir_ + "/a.bin";
  std::string data("hello\0world", 11);
  ASSERT_TRUE(writeFileAtomic(path, data, 0600).isOk());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto read = readFile(path);
  ASSERT_TRUE(read.isOk());
  EXPECT_EQ(*read, data);
  auto mapped = MappedFile::open(path);
  ASSERT_TRUE(mapped.isOk());
  EXPECT_EQ(mapped->view(), data);
  MappedFile moved = std::move(mapped.value());
  EXPECT_EQ(moved.size(), 11u);
}

TEST_F(FileUtilTest, ErrorsNameThePath) {
  auto missing = readFile(dir_ + "/nope");
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
  EXPECT_FALSE(readFile(dir_).isOk());  // a directory
  EXPECT_FALSE(MappedFile::open(dir_ + "/nope").isOk());
  ASSERT_TRUE(writeFileAtomic(dir_ + "/big", std::string(100, 'x')).isOk());
  EXPECT_FALSE(readFile(dir_ + "/big", 10).isOk());
}

TEST_F(FileUtilTest, EmptyFileMaps) {
  ASSERT_TRUE(writeFileAtomic(dir_ + "/empty", "").isOk());
  auto mapped = MappedFile::open(dir_ + "/empty");
  ASSERT_TRUE(mapped.isOk());
  EXPECT_EQ(mapped->size(), 0u);
}

}  // namespace
}  // namespace lg
