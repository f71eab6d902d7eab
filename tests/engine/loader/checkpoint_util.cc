#include "checkpoint_util.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/file_util.h"

namespace lg::engine::testing {

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "lg-engine-XXXXXX").string();
  char* p = ::mkdtemp(tmpl.data());
  EXPECT_NE(p, nullptr);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<EditableTensor> readFixtureTensors(const std::string& fixture) {
  std::vector<EditableTensor> out;
  auto file = SafetensorsFile::open(std::string(LG_FIXTURES_DIR) + "/" + fixture + "/model.safetensors");
  EXPECT_TRUE(file.isOk());
  if (!file.isOk()) return out;
  for (const TensorInfo& t : file->tensors()) {
    EditableTensor e{t.name, t.dtype, t.shape, {}};
    e.bytes.assign(file->data(t), file->data(t) + (t.end - t.begin));
    out.push_back(std::move(e));
  }
  return out;
}

void writeTensors(const std::string& path, const std::vector<EditableTensor>& tensors) {
  // Written by hand (not writeSafetensors) so tests can produce files whose
  // dtype/shape disagree with their byte ranges.
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", std::string(dtypeName(t.dtype))}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while (text.size() % 8) text.push_back(' ');
  std::string data(8, '\0');
  for (int i = 0; i < 8; ++i) data[static_cast<size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  data += text;
  for (const auto& t : tensors) data.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  ASSERT_TRUE(writeFileAtomic(path, data).isOk());
}

void writeConfig(const std::string& fixture, const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  auto text = readFile(std::string(LG_FIXTURES_DIR) + "/" + fixture + "/config.json");
  ASSERT_TRUE(text.isOk());
  nlohmann::json j = nlohmann::json::parse(*text);
  if (edit) edit(j);
  ASSERT_TRUE(writeFileAtomic(dir + "/config.json", j.dump(2)).isOk());
}

void writeCheckpoint(const std::string& fixture, const std::string& dir,
                     const std::function<void(std::vector<EditableTensor>&)>& edit_tensors,
                     const std::function<void(nlohmann::json&)>& edit_config) {
  std::vector<EditableTensor> tensors = readFixtureTensors(fixture);
  if (edit_tensors) edit_tensors(tensors);
  writeTensors(dir + "/model.safetensors", tensors);
  writeConfig(fixture, dir, edit_config);
}

}  // namespace lg::engine::testing
