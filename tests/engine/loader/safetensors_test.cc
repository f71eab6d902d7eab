// The safetensors reader on hostile bytes: every malformed header is a DataLoss
// error that names the file and the tensor, never a crash or an out-of-bounds read.
#include "engine/model/safetensors.h"

#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "checkpoint_util.h"
#include "common/file_util.h"

namespace lg::engine::testing {
namespace {

std::string fileWith(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\x01');
}

Status parse(const std::string& bytes) { return parseSafetensorsHeader(bytes, "test.safetensors").status(); }

void expectDataLoss(const std::string& bytes, const std::string& needle) {
  Status s = parse(bytes);
  ASSERT_FALSE(s.isOk()) << "accepted: " << needle;
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.toString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.toString();
  EXPECT_NE(s.message().find("test.safetensors"), std::string::npos) << s.toString();
}

TEST(SafetensorsTest, AcceptsAWellFormedHeader) {
  auto h = parseSafetensorsHeader(
      fileWith(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
               R"("b":{"dtype":"F32","shape":[],"data_offsets":[12,16]}})",
               16),
      "ok");
  ASSERT_TRUE(h.isOk()) << h.status().toString();
  EXPECT_EQ(h->tensors.size(), 2u);
  EXPECT_EQ(h->metadata.at("format"), "pt");
}

TEST(SafetensorsTest, RejectsTruncatedOrCorruptHeaders) {
  expectDataLoss("abc", "too short");
  std::string huge(8, '\0');
  huge[0] = '\x10';
  huge[1] = '\x27';  // 10000-byte header in an 8-byte file
  expectDataLoss(huge, "past the end");
  std::string giant(8, '\xff');
  expectDataLoss(giant, "100 MB");
  expectDataLoss(fileWith("{not json", 0), "not valid JSON");
  expectDataLoss(fileWith("[1,2]", 0), "not a JSON object");
  expectDataLoss(fileWith(R"({"a":[1]})", 0), "tensor 'a'");
  expectDataLoss(fileWith(R"({"__metadata__":{"k":1}})", 0), "__metadata__.k");
}

TEST(SafetensorsTest, RejectsBadTensorEntries) {
  expectDataLoss(fileWith(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})", 2), "unknown dtype");
  expectDataLoss(fileWith(R"({"w":{"shape":[2],"data_offsets":[0,2]}})", 2), "dtype");
  expectDataLoss(fileWith(R"({"w":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}})", 2), "tensor 'w'");
  expectDataLoss(fileWith(R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,2]}})", 2), "tensor 'w'");
  expectDataLoss(fileWith(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0]}})", 2), "data_offsets");
  expectDataLoss(fileWith(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[2,0]}})", 2), "begin > end");
  // Offsets out of range of the data section.
  expectDataLoss(fileWith(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 3), "run past the data section");
  expectDataLoss(fileWith(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,0]}})", 3), "tensor 'w'");
  // Offsets inconsistent with shape x dtype.
  expectDataLoss(fileWith(R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,4]}})", 8), "needs 8");
  expectDataLoss(fileWith(R"({"w":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,4]}})", 8), "overflows");
  // Overlapping tensors.
  expectDataLoss(fileWith(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 8),
                 "overlap");
}

TEST(SafetensorsTest, WriterOutputReadsBack) {
  TempDir dir;
  std::vector<TensorToWrite> tensors;
  tensors.push_back({"x", DType::kF32, {3}, [](std::span<uint8_t> out) {
                       const float v[3] = {1.0f, 2.0f, 3.0f};
                       std::memcpy(out.data(), v, sizeof v);
                     }});
  tensors.push_back({"y.z", DType::kBF16, {2, 5}, nullptr});
  ASSERT_TRUE(writeSafetensors(dir.path() + "/t.safetensors", tensors, {{"k", "v"}}).isOk());
  auto f = SafetensorsFile::open(dir.path() + "/t.safetensors");
  ASSERT_TRUE(f.isOk()) << f.status().toString();
  ASSERT_NE(f->find("y.z"), nullptr);
  EXPECT_EQ(f->find("y.z")->shapeString(), "[2, 5]");
  float v[3];
  std::memcpy(v, f->data(*f->find("x")), sizeof v);
  EXPECT_EQ(v[2], 3.0f);
  EXPECT_EQ(f->metadata().at("k"), "v");
  EXPECT_EQ((8 + f->find("x")->begin) % 8, 0u);  // header padded: data stays aligned
}

TEST(SafetensorsTest, StreamingMapIsAlignedAndReadsTheSameBytes) {
  const std::string path = std::string(LG_FIXTURES_DIR) + "/tiny-v2/model.safetensors";
  auto plain = SafetensorsFile::open(path);
  auto streaming = SafetensorsFile::open(path, /*for_streaming=*/true, /*drop_cached=*/true);
  ASSERT_TRUE(plain.isOk() && streaming.isOk());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(streaming->map().data()) % (2u << 20), 0u);
  ASSERT_EQ(plain->map().size(), streaming->map().size());
  EXPECT_EQ(std::memcmp(plain->map().data(), streaming->map().data(), plain->map().size()), 0);
  EXPECT_EQ(streaming->tensors().size(), plain->tensors().size());
}

}  // namespace
}  // namespace lg::engine::testing
